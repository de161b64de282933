"""The modules the default suite runs under autocast (``oplists/modules.toml``).

Each ``[[module]]`` is one ``torch.nn`` module built one way and called one way: its class,
its constructor's arguments, its forward's inputs (argument specs, as an op-list entry's
``args``), and what it exercises (the path it takes under autocast: a fused kernel in eval
without grad, a native kernel with no autocast rule, a loss on the fp32 lists). The
``modules`` family runs each in train and eval mode, with grad, under ``no_grad`` and
under ``inference_mode``, against the reference autocast of the device's op lists.

A module a torch release does not have yet is named with the release it came in
(``since``): before it, its items are not applicable; from it on, a missing class fails.
Every problem names the file, the entry and the field (:class:`OpListError`).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_conformance.schema import argspec
from amp_conformance.schema import validators as v
from amp_conformance.schema.location import builtin_dir
from amp_conformance.schema.problems import OpListError, Problems
from amp_conformance.schema.versions import release

FILE = "modules.toml"
#: field -> (required, what it holds); unknown fields are refused, naming these
FIELDS = {
    "id": (True, "the entry's id (letters, digits, _ . + -), unique in the file"),
    "module": (True, "the class's name in torch.nn (MultiheadAttention)"),
    "init": (False, "the constructor's keyword arguments (argument specs)"),
    "init_args": (False, "the constructor's positional arguments (argument specs)"),
    "args": (True, "the forward's positional inputs (argument specs; {same = i}: the very "
                   "object of input i, for self-attention's query, key and value)"),
    "kwargs": (False, "the forward's keyword inputs (argument specs)"),
    "exercises": (True, "what the module does under autocast that the entry is here for"),
    "since": (False, "the first torch release with the module (default: every release)"),
}


@dataclass(frozen=True)
class Same:
    """The very object of an earlier positional input (``{same = i}``)."""

    index: int


@dataclass(frozen=True)
class ModuleEntry:
    """One module, built and called one way."""

    id: str
    module: str
    args: tuple[argspec.Spec | Same, ...]
    exercises: str
    init_args: tuple[argspec.Spec, ...] = ()
    init: dict[str, argspec.Spec] = field(default_factory=dict)
    kwargs: dict[str, argspec.Spec] = field(default_factory=dict)
    since: str | None = None
    path: str = ""

    def version_gap(self, version: str | None = None) -> str | None:
        """Why the running torch (or ``version``) cannot have the module, or None."""
        if self.since is not None and release(version) < self.since:
            return (f"not applicable: torch.nn.{self.module} came in torch {self.since}, "
                    f"this is {release(version)}")
        return None


def _inputs(value: Any) -> tuple[argspec.Spec | Same, ...]:
    """The forward's inputs: argument specs, or ``{same = i}`` for an earlier one."""
    if not isinstance(value, list):
        raise v.invalid(f"expected an array of argument specs, got {value!r}")
    same = {i: x for i, x in enumerate(value) if isinstance(x, dict) and set(x) == {"same"}}
    for i, x in same.items():
        j = x["same"]
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < i or j in same:
            raise v.invalid(f"{{same = {j!r}}} must name an earlier input that is not itself "
                            "a same", f"[{i}]")
    specs = iter(v.args([x for i, x in enumerate(value) if i not in same]))
    return tuple(Same(same[i]["same"]) if i in same else next(specs) for i in range(len(value)))


_PARSERS = {"id": v.identifier, "module": v.string, "init": v.kwargs, "init_args": v.args,
            "args": _inputs, "kwargs": v.kwargs, "exercises": v.string, "since": v.version}


def _entry(raw: Any, index: int, path: Path, seen: set[str],
           problems: Problems) -> ModuleEntry | None:
    if not isinstance(raw, dict):
        problems.add(f"#{index}", None, "expected a table", kind="module")
        return None
    label = str(raw.get("id", f"#{index}"))
    before = len(problems.items)
    for key in sorted(set(raw) - set(FIELDS)):
        problems.add(label, key, f"unknown field; allowed: {', '.join(FIELDS)}", kind="module")
    for key, (required, what) in FIELDS.items():
        if required and key not in raw:
            problems.add(label, key, f"missing: {what}", kind="module")
    values: dict[str, Any] = {}
    for key in FIELDS:
        if key in raw:
            try:
                values[key] = _PARSERS[key](raw[key])
            except v.Invalid as exc:
                problems.invalid(label, key, exc, kind="module")
    if values.get("id") in seen:
        problems.add(label, "id", "a second entry with this id", kind="module")
    seen.add(values.get("id", label))
    if len(problems.items) > before:
        return None
    return ModuleEntry(**{k: tuple(x) if k in ("args", "init_args") else x
                          for k, x in values.items()}, path=str(path))


def parse(path: Path | str) -> tuple[ModuleEntry, ...]:
    """Every ``[[module]]`` of the file (raises OpListError naming the file, the entry and
    the field)."""
    path = Path(path)
    problems = Problems(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        problems.add(None, None, f"cannot read it: {exc}", kind="module")
        problems.raise_any()
    for key in sorted(set(data) - {"module"}):
        problems.add(None, key, "unknown table; allowed: [[module]]", kind="table")
    raws = data.get("module", [])
    if not isinstance(raws, list):
        problems.add(None, "module", "expected [[module]] tables", kind="table")
        raws = []
    seen: set[str] = set()
    found = [_entry(raw, i, path, seen, problems) for i, raw in enumerate(raws)]
    problems.raise_any()
    return tuple(e for e in found if e is not None)


@functools.cache
def builtin() -> tuple[ModuleEntry, ...]:
    """What this package runs by default (``oplists/modules.toml``)."""
    return parse(builtin_dir() / FILE)


__all__ = ["FIELDS", "FILE", "ModuleEntry", "OpListError", "Same", "builtin", "parse"]
