"""The deprecated ``torch.<device>.amp.autocast`` entry point, per op-list entry: it gives
``torch.autocast``'s result and warns that it is deprecated."""

from typing import Any

from amp_conformance.core import devices
from amp_conformance.core.registry import Check


def not_applicable(case: Any) -> str | None:
    device = case.target.device
    if devices.legacy_autocast(device) is None:
        return f"not applicable: {device} has no legacy torch.{device}.amp.autocast"
    if case.target.fake:
        return "not applicable in --fake mode: the legacy entry point needs the device"
    if case.entry.policy == "banned":
        return "not applicable: a banned op has no output under autocast"
    return None


CHECKS = (
    Check("legacy", "the deprecated torch.<device>.amp.autocast gives torch.autocast's result "
          "and warns", per_entry=True, needs_values=True, not_applicable=not_applicable),
)
