"""``[[exclude]]`` tables and ``[list] drop`` tables: what a list deliberately leaves out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from amp_conformance.core import hardware
from amp_conformance.schema.problems import Problems
from amp_conformance.schema.versions import parse_bounds, version_gap

EXCLUDE_KEYS = ("overload", "reason", "since", "until", "fake", "requires")
DROP_KEYS = ("id", "overload", "reason")
#: A dispatcher operator name with an optional overload: ``aten::norm.Scalar``.
OVERLOAD = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


@dataclass(frozen=True)
class Exclusion:
    """An overload of the device's policy that the list deliberately leaves unexercised.

    Only for overloads that cannot be reached from Python or that need hardware features
    (the coverage check counts them apart from covered ones and prints each reason).
    """

    overload: str
    reason: str
    since: str | None = None
    until: str | None = None
    path: str = ""
    device: str = ""
    #: holds only with ``--fake`` (True) or only on the real device (False); None: both.
    #: For an overload the list checks on the device but fake tensors cannot run.
    fake: bool | None = None
    #: a probe of :mod:`amp_conformance.core.hardware`: the exclusion holds only where the
    #: running machine lacks the feature (for an overload only that feature can run)
    requires: str | None = None

    def version_gap(self, version: str | None = None) -> str | None:
        """Why this exclusion does not apply to the running torch, or None if it does."""
        return version_gap(self.since, self.until, version)

    def applies(self, fake: bool, amp_dtypes: Sequence[torch.dtype] = ()) -> bool:
        """Whether the exclusion holds in this run: in its versions, its mode, and, with
        ``requires``, on a machine lacking the feature for every autocast dtype of the run."""
        if self.version_gap() is not None or self.fake not in (None, fake):
            return False
        return self.requires is None or all(
            hardware.missing(self.requires, d) is not None for d in amp_dtypes)


@dataclass(frozen=True)
class Drop:
    """An entry (``id``) or exclusion (``overload``) of the base list a derived list removes."""

    id: str | None
    overload: str | None
    reason: str


def _known_overloads() -> frozenset[str]:
    return frozenset(torch._C._dispatch_get_all_op_names())


def parse_exclusion(raw: Any, path: Path | str, index: int, device: str) -> Exclusion:
    """One ``[[exclude]]`` table; raises OpListError listing every problem of it."""
    problems = Problems(path)
    exclusion = exclusion_of(raw, index, device, problems)
    problems.raise_any()
    assert exclusion is not None
    return exclusion


def exclusion_of(raw: Any, index: int, device: str, problems: Problems) -> Exclusion | None:
    """An overload, the written reason, optional version bounds; None on a problem."""
    if not isinstance(raw, dict):
        problems.add(f"#{index}", None, "an exclusion must be a table ([[exclude]])", "exclude")
        return None
    before = len(problems.items)
    overload = raw.get("overload")
    label = overload if isinstance(overload, str) and OVERLOAD.match(overload) else f"#{index}"
    if label != overload:
        problems.add(label, "overload", "expected an operator overload like "
                                        f"'aten::norm.Scalar', got {overload!r}", "exclude")
    for key in sorted(set(raw) - set(EXCLUDE_KEYS)):
        problems.add(label, key, f"unknown field; allowed: {', '.join(EXCLUDE_KEYS)}", "exclude")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        problems.add(label, "reason", "every exclusion needs a written reason", "exclude")
    bounds = parse_bounds(raw, "exclude", label, problems)
    fake = raw.get("fake")
    if fake is not None and not isinstance(fake, bool):
        problems.add(label, "fake", f"expected true (only with --fake) or false (only on the "
                                    f"real device), got {fake!r}", "exclude")
    requires = raw.get("requires")
    if requires is not None and requires not in hardware.PROBES:
        problems.add(label, "requires", f"unknown value {requires!r}; allowed: "
                                        f"{', '.join(hardware.PROBES)}", "exclude")
    if len(problems.items) > before:
        return None
    exclusion = Exclusion(overload, reason, bounds["since"], bounds["until"], problems.path,
                          device, fake, requires)
    if exclusion.version_gap() is None and overload not in _known_overloads():
        problems.add(label, "overload", "unknown overload: the dispatcher of torch "
                                        f"{torch.__version__} has no {overload}", "exclude")
        return None
    return exclusion


def _drop(d: Any, where: str, problems: Problems) -> Drop | None:
    if not isinstance(d, dict):
        problems.add(None, where, "expected a table {id = ..., reason = ...}")
        return None
    before = len(problems.items)
    for key in sorted(set(d) - set(DROP_KEYS)):
        problems.add(None, f"{where}.{key}", f"unknown field; allowed: {', '.join(DROP_KEYS)}")
    if ("id" in d) == ("overload" in d):
        problems.add(None, where, "a drop names exactly one of 'id' (an entry) or 'overload' "
                                  "(an exclusion) of the base list")
    else:
        target = d.get("id", d.get("overload"))
        if not isinstance(target, str) or not target:
            problems.add(None, f"{where}.{'id' if 'id' in d else 'overload'}",
                         f"expected a non-empty string, got {target!r}")
    reason = d.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        problems.add(None, f"{where}.reason", "every drop needs a written reason")
    return None if len(problems.items) > before else Drop(d.get("id"), d.get("overload"), reason)


def parse_drops(meta: dict, problems: Problems) -> tuple[Drop, ...]:
    raw = meta.get("drop", [])
    if not isinstance(raw, list):
        problems.add(None, "list.drop", "expected an array of {id = ..., reason = ...} tables")
        return ()
    drops = [_drop(d, f"list.drop[{i}]", problems) for i, d in enumerate(raw)]
    if drops and not meta.get("derive_from"):
        problems.add(None, "list.drop", "drop only applies to a list with derive_from")
    return tuple(d for d in drops if d is not None)
