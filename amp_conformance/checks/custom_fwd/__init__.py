"""``torch.amp.custom_fwd``/``custom_bwd``: ``cast_inputs`` casts the forward's eligible
inputs, and backward runs in the forward's autocast state (Hypothesis properties)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("custom_fwd", "torch.amp.custom_fwd/custom_bwd cast inputs and carry the forward's "
          "state into backward"),
)
