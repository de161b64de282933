"""Every overload of the device's autocast policy is covered by an op-list entry that a
policy check reached, or excluded with a reason (``check``; ``python -m amp_conformance
coverage`` prints the whole table)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("coverage", "every overload of the device's autocast policy is covered by an entry "
          "or excluded with a reason"),
)
