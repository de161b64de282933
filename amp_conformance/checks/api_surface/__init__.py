"""The rest of the autocast API: legacy and device-module getters, setters and decorators
agree with ``torch.autocast``'s state."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("api_surface", "legacy and device-module autocast getters, setters and decorators "
          "agree with torch.autocast's state"),
)
