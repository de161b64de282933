"""Where the shipped data files live: ``oplists/`` in a checkout, ``amp_conformance/oplists``
in an installed wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def builtin_dir() -> Path:
    """The op lists shipped with the package (``oplists/`` in a checkout)."""
    spec = importlib.util.find_spec("amp_conformance.oplists")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location, "cpu.toml").is_file():
                return Path(location)
    return Path(__file__).resolve().parents[2] / "oplists"  # a checkout: amp_conformance/schema/..
