"""What the OpInfo tier must know of op_db (``oplists/opinfo.toml``): PyTorch's own
departures on the operator surface, and the ops whose values cannot be compared.

``[[incomparable]]`` names an OpInfo whose output values are not a function of its inputs
(``empty_like``: uninitialised memory), with why: its dtypes and shapes are still held to
the policy, its values are not compared. ``[[departure]]`` names OpInfo samples that
autocast turns into an error where the same call works outside it, in PyTorch itself.

Each ``[[departure]]`` names the OpInfo (``op``, ``variant``), the reference defect it
shows (an id of ``oplists/defects.toml``: its summary, links and ``fixed`` release), the
start of the error PyTorch raises, the devices and autocast dtypes it was seen on, and the
evidence (what was run, where, with which torch). The OpInfo tier
(:mod:`amp_conformance.checks.opinfo.judge`) accepts exactly that error, on exactly those
samples' op, as the defect reproduced; any other error still fails. Nothing is skipped.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from amp_conformance.schema import validators as v
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.location import builtin_dir
from amp_conformance.schema.problems import Problems

FILE = "opinfo.toml"
#: field -> (required, what it holds); unknown fields are refused, naming these
FIELDS = {
    "op": (True, "the OpInfo's name (op_db's OpInfo.name)"),
    "variant": (False, "the OpInfo's variant_test_name (default: none)"),
    "defect": (True, "the id of the reference defect in oplists/defects.toml"),
    "error": (True, "the start of the error PyTorch raises inside autocast"),
    "devices": (False, "device types it was seen on (default: every device)"),
    "amp_dtypes": (False, "autocast dtypes it was seen under (default: both)"),
    "evidence": (True, "what was run, where and with which torch, and what it printed"),
}


INCOMPARABLE_FIELDS = {
    "op": (True, "the OpInfo's name (op_db's OpInfo.name)"),
    "variant": (False, "the OpInfo's variant_test_name (default: none)"),
    "reason": (True, "why its output values are not a function of its inputs"),
    "devices": (False, "device types where they are not (default: every device)"),
    "noncontiguous": (False, "true: its non-contiguous forms alone (default: every form)"),
}


@dataclass(frozen=True)
class Incomparable:
    op: str
    variant: str
    reason: str
    devices: tuple[str, ...] | None = None
    noncontiguous: bool = False

    def covers(self, device: str, noncontiguous: bool) -> bool:
        """Whether a form (non-contiguous or not) on ``device`` is not compared."""
        return ((self.devices is None or device in self.devices)
                and (noncontiguous or not self.noncontiguous))


@dataclass(frozen=True)
class Departure:
    op: str
    variant: str
    defect: str
    error: str
    devices: tuple[str, ...] | None
    amp_dtypes: tuple[str, ...] | None
    evidence: str

    def matches(self, target: Any, amp_dtype: torch.dtype, error: BaseException) -> bool:
        """Whether ``error``, raised on ``target`` under ``amp_dtype``, is this departure
        (while the running torch still has the defect)."""
        name = str(amp_dtype).removeprefix("torch.")
        return (defect_registry()[self.defect].applies()
                and (self.devices is None or target.device in self.devices)
                and (self.amp_dtypes is None or name in self.amp_dtypes)
                and self.error in str(error))


def _names(value: Any, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise v.invalid(f"expected a non-empty array of names, got {value!r}")
    bad = [x for x in value if allowed is not None and x not in allowed]
    if bad:
        raise v.invalid(f"unknown {', '.join(map(repr, bad))}; allowed: {', '.join(allowed)}")
    return tuple(value)


_PARSERS = {"op": v.string, "variant": v.text, "error": v.string, "evidence": v.string,
            "reason": v.string, "devices": _names, "amp_dtypes": lambda x: _names(x, v.AMP_DTYPES),
            "noncontiguous": v.boolean}


def _fields(raw: Any, index: int, kind: str, fields: dict, problems: Problems) -> dict | None:
    """The table's parsed values, or None with each problem recorded (file, op, field)."""
    if not isinstance(raw, dict):
        problems.add(f"#{index}", None, "expected a table", kind=kind)
        return None
    label = f"{raw.get('op', '?')}{'-' + raw['variant'] if raw.get('variant') else ''} (#{index})"
    before = len(problems.items)
    for key in sorted(set(raw) - set(fields)):
        problems.add(label, key, f"unknown field; allowed: {', '.join(fields)}", kind=kind)
    for key, (required, what) in fields.items():
        if required and key not in raw:
            problems.add(label, key, f"missing: {what}", kind=kind)
    values: dict[str, Any] = {}
    for key in fields:
        if key in raw and key in _PARSERS:
            try:
                values[key] = _PARSERS[key](raw[key])
            except v.Invalid as exc:
                problems.invalid(label, key, exc, kind=kind)
    if "defect" in raw and raw["defect"] not in defect_registry():
        problems.add(label, "defect", f"unknown defect {raw['defect']!r}; recorded in "
                     f"oplists/defects.toml: {', '.join(sorted(defect_registry()))}", kind=kind)
    if len(problems.items) > before:
        return None
    return {**values, "variant": values.get("variant", ""), "defect": raw.get("defect")}


def _departure(raw: Any, index: int, problems: Problems) -> Departure | None:
    f = _fields(raw, index, "departure", FIELDS, problems)
    return None if f is None else Departure(
        f["op"], f["variant"], f["defect"], f["error"], f.get("devices"), f.get("amp_dtypes"),
        f["evidence"])


def _incomparable(raw: Any, index: int, problems: Problems) -> Incomparable | None:
    f = _fields(raw, index, "incomparable", INCOMPARABLE_FIELDS, problems)
    return None if f is None else Incomparable(f["op"], f["variant"], f["reason"],
                                               f.get("devices"), f.get("noncontiguous", False))


@dataclass(frozen=True)
class Known:
    """Everything ``oplists/opinfo.toml`` (or a vendor's file of the same schema) says."""

    departures: tuple[Departure, ...] = ()
    incomparable: tuple[Incomparable, ...] = ()


def parse(path: Path | str) -> Known:
    """Every table of the file (raises OpListError naming the file, the op and the field)."""
    path = Path(path)
    problems = Problems(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        problems.add(None, None, f"cannot read it: {exc}", kind="departure")
        problems.raise_any()
    for key in sorted(set(data) - {"departure", "incomparable"}):
        problems.add(None, key, "unknown table; allowed: [[departure]], [[incomparable]]",
                     kind="table")

    def tables(key: str, make: Any) -> tuple:
        raws = data.get(key, [])
        found = [make(raw, i, problems) for i, raw in enumerate(raws if isinstance(raws, list) else [])]
        return tuple(x for x in found if x is not None)

    known = Known(tables("departure", _departure), tables("incomparable", _incomparable))
    problems.raise_any()
    return known


@functools.cache
def builtin() -> Known:
    """What this package records (``oplists/opinfo.toml``)."""
    return parse(builtin_dir() / FILE)


def departures_of(op: str, variant: str) -> tuple[Departure, ...]:
    return tuple(d for d in builtin().departures if (d.op, d.variant) == (op, variant))


def incomparable(op: str, variant: str) -> tuple[Incomparable, ...]:
    """The op's forms whose values are not compared, and why."""
    return tuple(x for x in builtin().incomparable if (x.op, x.variant) == (op, variant))
