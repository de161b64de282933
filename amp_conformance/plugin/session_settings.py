"""The run's settings: options, backend set-up and vendor declarations, resolved once.

Every hook, fixture and the report read the settings through :func:`settings`; the first
call validates them (a bad device, dtype or op list is a pytest usage error).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.plugin import options, vendor
from amp_conformance.plugin.options import Settings
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpList, OpListError

_SETTINGS = pytest.StashKey[Settings]()


def settings(config: pytest.Config) -> Settings:
    """The run's settings, validated on first use (raises pytest.UsageError)."""
    if _SETTINGS not in config.stash:
        vendor.setup_backend(config)
        resolved = vendor.apply(config, options.resolve(config))
        try:
            lists = load_oplist(resolved.device, resolved.oplists)
        except OpListError as exc:
            raise pytest.UsageError(f"amp-conformance: bad op list: {exc}") from None
        hooked = {str(Path(p)) for p in vendor.declarations(config).hook_oplists}
        _check_lists(resolved, lists, hooked)
        config.stash[_SETTINGS] = resolved
    return config.stash[_SETTINGS]


def _check_lists(resolved: Settings, lists: OpList, hooked: set[str]) -> None:
    """Refuse extra lists the run would ignore, and a device with no entry to check: both
    would otherwise look green (nothing generated, every item skipped)."""
    unused = [p for p in resolved.oplists if p not in set(lists.paths)]
    if unused:
        raise pytest.UsageError("amp-conformance: " + "; ".join(
            f"{'hook pytest_amp_conformance_oplists: ' if p in hooked else '--oplist '}{p} "
            f"describes another device than {resolved.device!r}: its [list] device is "
            f"{oplist.parse_file(p).device!r}" for p in unused))
    if not lists.entries:
        where = (f"its lists ({', '.join(lists.paths)}) have no entry" if lists.paths
                 else "no op list describes it")
        raise pytest.UsageError(
            f"amp-conformance: nothing to check on device {resolved.device!r}: {where}; pass "
            f"--oplist PATH with a list whose [list] device = \"{resolved.device}\" (built-in "
            f"lists exist for {', '.join(oplist.builtin_devices())})")
