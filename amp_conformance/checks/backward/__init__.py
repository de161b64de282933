"""Gradients through autocast, per op-list entry: forward under autocast, backward outside
the region, every float32 input's gradient in its dtype and equal to the hand-cast
control's (``check``)."""

from amp_conformance.checks.backward.check import not_applicable
from amp_conformance.core.registry import Check

CHECKS = (
    Check("backward", "gradients through autocast (backward outside the region) reach every "
          "float32 input in its dtype and equal the hand-cast control's", per_entry=True,
          needs_values=True, not_applicable=not_applicable),
)
