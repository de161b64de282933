"""Each op-list entry outside autocast: it runs in its input dtypes, untouched (or raises
where its list records that only autocast makes it run)."""

from typing import Any

from amp_conformance.core.registry import Check


def not_applicable(case: Any) -> str | None:
    if case.entry.policy == "banned":
        return "not applicable: the policy check of a banned op also runs it outside autocast"
    return None


CHECKS = (
    Check("outside", "outside autocast the call runs in its input dtypes, untouched",
          per_entry=True, not_applicable=not_applicable),
)
