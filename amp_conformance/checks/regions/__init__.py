"""Autocast regions: nesting, ``enabled=False``, the decorator form and the default dtype
restore the state exactly; ``machine`` checks the same as a Hypothesis state machine over
every sequence of entering, leaving, decorating, raising, disabling and threads
(``model``: the stack of open regions it is held to)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("regions", "region nesting, enabled=False, the decorator form and the default dtype "
          "restore the autocast state exactly; as a state machine too, rule by rule"),
)
