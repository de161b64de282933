"""Bad autocast calls raise or warn with the documented message (an invalid device, a
non-string device type, an unsupported dtype, the decorator form given no callable)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("errors", "bad autocast calls raise or warn with the documented message"),
)
