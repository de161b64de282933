"""Torch version bounds (``since``/``until``) of entries, exclusions and messages."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch.torch_version import TorchVersion

from amp_conformance.schema import validators
from amp_conformance.schema.problems import BAD, Problems


def release(version: str | None = None) -> TorchVersion:
    """The release a torch version is compared as in since/until bounds: its numeric part.

    A nightly (``2.15.0.dev20260101``) or source build (``2.15.0a0+git…``) already carries
    what lands in 2.15.0, so it counts as 2.15.0 (PEP 440 would order it before 2.15).
    """
    v = version or torch.__version__
    return TorchVersion(re.match(r"\d+(\.\d+)*", v).group())


def version_gap(since: str | None, until: str | None, version: str | None) -> str | None:
    """Why bounds ``since``/``until`` leave out ``version`` (default: the running torch)."""
    v, r = version or torch.__version__, release(version)
    if since and r < since:
        return f"not applicable: needs torch >= {since}, running {v}"
    if until and r >= until:
        return f"not applicable: removed in torch {until}, running {v}"
    return None


def parse_bounds(raw: dict, kind: str, label: str, problems: Problems) -> dict[str, Any]:
    """The ``since``/``until`` of a table (BAD where invalid, the problem recorded)."""
    bounds: dict[str, Any] = {}
    for key in ("since", "until"):
        try:
            bounds[key] = None if key not in raw else validators.version(raw[key])
        except validators.Invalid as exc:
            problems.invalid(label, key, exc, kind)
            bounds[key] = BAD
    check_bounds(bounds["since"], bounds["until"], label, kind, problems)
    return bounds


def check_bounds(since: Any, until: Any, label: str, kind: str, problems: Problems) -> None:
    """``since`` < ``until``, where both parsed: otherwise no torch version is in bounds."""
    if since in (None, BAD) or until in (None, BAD) or TorchVersion(since) < until:
        return
    problems.add(label, "until", f"until {until!r} must be later than since {since!r}: "
                                 f"the {kind} would apply to no torch version", kind)
