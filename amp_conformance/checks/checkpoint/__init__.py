"""``torch.utils.checkpoint`` under autocast: the recompute runs in the forward's autocast
state and matches the un-checkpointed outputs and gradients (pytorch#71124)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("checkpoint", "torch.utils.checkpoint recomputes in the forward's autocast state and "
          "matches the un-checkpointed outputs and gradients", capability="checkpoint"),
)
