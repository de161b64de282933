"""Which tensors autocast casts: floating, non-float64 tensors of the device, and no
other (integers, float64 and another device's tensors pass untouched)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("eligibility", "only floating, non-float64 tensors of the device are cast"),
)
