"""The values of each op-list entry under autocast: equal to a control run with autocast off
on inputs cast by hand (bitwise, or within tolerances with ``--numerics close``)."""

from typing import Any

from amp_conformance.core.registry import Check

_FAKE_NO_VALUES = "not applicable in --fake mode: fake tensors carry no values to compare"
_BANNED_NO_OUTPUT = "not applicable: a banned op has no output under autocast"


def not_applicable(case: Any) -> str | None:
    if case.target.fake:
        return _FAKE_NO_VALUES
    if case.entry.policy == "banned":
        return _BANNED_NO_OUTPUT
    return None


CHECKS = (
    Check("numerics", "the autocast output equals a control run with autocast off on inputs "
          "cast by hand", per_entry=True, needs_values=True, not_applicable=not_applicable),
)
