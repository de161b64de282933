"""The run's settings: options, backend set-up and vendor declarations, resolved once.

Every hook, fixture and the report read the settings through :func:`settings`; the first
call validates them (a bad device, dtype or op list is a pytest usage error).
"""

from __future__ import annotations

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.plugin import options, vendor
from amp_conformance.plugin.options import Settings
from amp_conformance.schema.oplist import OpListError

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
        unused = set(resolved.oplists) - set(lists.paths)
        if unused:
            raise pytest.UsageError(
                f"amp-conformance: --oplist {', '.join(sorted(unused))} describes another "
                f"device than {resolved.device!r} (see its [list] device)"
            )
        config.stash[_SETTINGS] = resolved
    return config.stash[_SETTINGS]
