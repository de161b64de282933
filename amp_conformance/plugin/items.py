"""What a conformance item is, decided in one place.

An item is a conformance item when its suite function declares its check
(``@pytest.mark.amp_check(name)``): the plugin is loaded wherever the package is installed
and leaves every other test as it is. Its reports carry what it is (the user property
:data:`ITEM_PROPERTY`, set at collection on whichever process collects), so a process that
only receives reports (the xdist controller) tells them apart too.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from amp_conformance.core.errors import EXCUSE_PROPERTY as _EXCUSE

MARKER = "amp_check"
#: the user properties a conformance item's reports may carry, read by the report:
#: what the item is (set at collection),
ITEM_PROPERTY = "amp_item"
#: the dtypes its calls gave (the policy check),
OBSERVED_PROPERTY = "amp_observed"
#: its reference-defect verdict (checks.defects.PROPERTY),
DEFECT_PROPERTY = "amp_defect"
#: an OpInfo-tier item's summary (checks.opinfo.check.PROPERTY),
OPINFO_PROPERTY = "amp_opinfo"
#: that the device was lost during it (plugin.health)
LOST_PROPERTY = "amp_device_lost"
#: the excuse it was granted, its mechanism and evidence (plugin.excuses)
EXCUSE_PROPERTY = _EXCUSE


#: the state a conformance item started from (plugin's isolation fixture), where an
#: excuse's proof starts from (plugin.excuses)
START_STATE = pytest.StashKey[object]()


def check_of(item: pytest.Item) -> str | None:
    """The check an item performs, or None for an item that is no conformance item."""
    marker = item.get_closest_marker(MARKER)
    return marker.args[0] if marker is not None and marker.args else None


def is_conformance(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def has_conformance_items(items: list[pytest.Item]) -> bool:
    """Whether a run collected conformance items (another project's run is left alone)."""
    return any(is_conformance(item) for item in items)


def checks_of(obj: Any, module: Any = None) -> list[str]:
    """The checks a suite function declares, read before it is an item (at collection):
    its own marks, and its module's ``pytestmark``."""
    if not inspect.isfunction(obj):
        return []
    marks = [*getattr(obj, "pytestmark", []), *_listed(getattr(module, "pytestmark", []))]
    return [m.args[0] for m in marks if getattr(m, "name", None) == MARKER and m.args]


def _listed(marks: Any) -> list[Any]:
    return list(marks) if isinstance(marks, (list, tuple)) else [marks]


def info_of(report: Any) -> dict[str, Any] | None:
    """What a conformance item's report says it is, or None for any other report."""
    info = dict(getattr(report, "user_properties", ()) or ()).get(ITEM_PROPERTY)
    return info if info is not None and info.get("check") is not None else None
