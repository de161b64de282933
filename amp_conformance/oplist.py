"""Load and validate declarative op lists (TOML, data only).

Every problem is reported as an :class:`OpListError` naming the file, the entry id
and the field, so a vendor editing a list never sees a traceback from deep inside.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.torch_version import TorchVersion

from . import argspec
from .categories import CATEGORIES, DEFAULT_CAST, DEFAULT_EXPECT, NAMESPACES

ENTRY_KEYS = {
    "id", "op", "category", "namespace", "method", "args", "kwargs", "expect", "cast",
    "expect_outside", "since", "until", "tolerance", "skip", "amp_dtypes", "error", "note",
    "override",
}
LIST_KEYS = {"device", "default_amp_dtype", "source", "description"}
SKIP_CONDITIONS = {"amp_dtype", "hip", "numerics", "fake"}
CASTS = ("amp", "float32", "widest", "none")
_ID = re.compile(r"^[A-Za-z0-9_.+-]+$")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


class OpListError(ValueError):
    """A malformed op list: the message names the file, entry id and field."""

    def __init__(self, path: Path | str, entry: str | None, field: str | None, message: str):
        where = str(path)
        if entry is not None:
            where += f": entry {entry!r}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.entry, self.field = str(path), entry, field


@dataclass(frozen=True)
class Skip:
    reason: str
    conditions: Mapping[str, Any]

    def applies(self, amp_dtype: torch.dtype, numerics: str, fake: bool) -> bool:
        values = {
            "amp_dtype": str(amp_dtype).removeprefix("torch."),
            "hip": torch.version.hip is not None,
            "numerics": numerics,
            "fake": fake,
        }
        return all(values[k] == v for k, v in self.conditions.items())


@dataclass(frozen=True)
class Entry:
    """One op-list entry: an op call and the autocast behaviour expected of it."""

    id: str
    op: str
    category: str
    policy: str
    namespace: str | None
    method: bool | None
    args: tuple[argspec.Spec, ...]
    kwargs: Mapping[str, argspec.Spec]
    expect: str
    cast: str
    expect_outside: str
    since: str | None = None
    until: str | None = None
    tolerance: Mapping[str, float] | None = None
    skips: tuple[Skip, ...] = ()
    amp_dtypes: tuple[str, ...] | None = None
    error: str | None = None
    note: str = ""
    path: str = ""
    device: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def version_gap(self, version: str | None = None) -> str | None:
        """Why this entry does not apply to the running torch, or None if it does."""
        v = TorchVersion(version or torch.__version__)
        if self.since and v < self.since:
            return f"not applicable: needs torch >= {self.since}, running {v}"
        if self.until and v >= self.until:
            return f"not applicable: removed in torch {self.until}, running {v}"
        return None

    @property
    def qualname(self) -> str:
        if self.namespace is None or self.namespace == "Tensor":
            return f"Tensor.{self.op}"
        return f"{self.namespace}.{self.op}"


@dataclass(frozen=True)
class OpList:
    device: str
    default_amp_dtype: str | None
    entries: tuple[Entry, ...]
    paths: tuple[str, ...]


def module_for(namespace: str) -> Any:
    obj: Any = torch
    for part in namespace.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def variants(entry: Entry) -> list[tuple[str, Any]]:
    """The callables an entry is checked through: the namespace function and/or Tensor method."""
    found = []
    if entry.namespace not in (None, "Tensor"):
        module = module_for(entry.namespace)
        fn = getattr(module, entry.op, None) if module is not None else None
        if fn is not None:
            found.append((entry.qualname, fn))
    want_method = entry.method if entry.method is not None else True
    if want_method and hasattr(torch.Tensor, entry.op):
        name = entry.op

        def method(first, *rest, **kwargs):
            return getattr(first, name)(*rest, **kwargs)

        found.append((f"Tensor.{entry.op}", method))
    elif entry.method is True and not hasattr(torch.Tensor, entry.op):
        return []
    return found


def _fail(path, entry_id, fieldname, message):
    raise OpListError(path, entry_id, fieldname, message)


def _string(raw, key, path, eid, required=False, choices=None):
    value = raw.get(key)
    if value is None:
        if required:
            _fail(path, eid, key, "missing")
        return None
    if not isinstance(value, str) or not value:
        _fail(path, eid, key, f"expected a non-empty string, got {value!r}")
    if choices is not None and value not in choices:
        _fail(path, eid, key, f"unknown value {value!r}; allowed: {', '.join(choices)}")
    return value


def _dtype_or(raw, key, path, eid, extra: Iterable[str]):
    value = raw.get(key)
    if value is None:
        return None
    allowed = list(extra) + sorted(argspec.DTYPES)
    if value not in allowed:
        _fail(path, eid, key, f"unknown dtype {value!r}; allowed: {', '.join(allowed)}")
    return value


def parse_entry(raw: Any, path: Path | str, index: int, device: str) -> Entry:
    if not isinstance(raw, dict):
        _fail(path, f"#{index}", None, "an entry must be a table ([[entry]])")
    eid = raw.get("id")
    if not isinstance(eid, str) or not _ID.match(eid):
        _fail(path, f"#{index}", "id", f"expected an id of letters, digits and _.+-, got {eid!r}")
    unknown = set(raw) - ENTRY_KEYS
    if unknown:
        _fail(path, eid, sorted(unknown)[0], f"unknown field; allowed: {', '.join(sorted(ENTRY_KEYS))}")
    op = _string(raw, "op", path, eid, required=True)
    category_name = _string(raw, "category", path, eid, required=True, choices=list(CATEGORIES))
    category = CATEGORIES[category_name]
    namespace = raw.get("namespace", category.namespace)
    if namespace is not None and namespace not in NAMESPACES:
        _fail(path, eid, "namespace", f"unknown namespace {namespace!r}; allowed: {', '.join(NAMESPACES)}")
    method = raw.get("method")
    if method is not None and not isinstance(method, bool):
        _fail(path, eid, "method", "expected true or false")
    args_raw = raw.get("args", [])
    if not isinstance(args_raw, list):
        _fail(path, eid, "args", "expected an array of argument specs")
    kwargs_raw = raw.get("kwargs", {})
    if not isinstance(kwargs_raw, dict):
        _fail(path, eid, "kwargs", "expected a table of keyword argument specs")
    try:
        args = tuple(argspec.parse(v, f"args[{i}]") for i, v in enumerate(args_raw))
        kwargs = {k: argspec.parse(v, f"kwargs.{k}") for k, v in kwargs_raw.items()}
    except argspec.SpecError as exc:
        _fail(path, eid, exc.field, str(exc))
    policy = category.policy
    expect = _dtype_or(raw, "expect", path, eid, ["amp", "widest", "error", "none"])
    expect = expect or DEFAULT_EXPECT[policy]
    if expect is None:
        _fail(path, eid, "expect", f"category {category_name} needs an explicit expected dtype")
    if policy == "banned" and expect != "error":
        _fail(path, eid, "expect", "a banned op is expected to raise: expect = 'error'")
    cast = _string(raw, "cast", path, eid, choices=CASTS) or DEFAULT_CAST[policy]
    expect_outside = _dtype_or(raw, "expect_outside", path, eid, ["inputs", "none", "error"])
    expect_outside = expect_outside or "inputs"
    bounds = {}
    for key in ("since", "until"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not _VERSION.match(value)):
            _fail(path, eid, key, f"expected a version like '2.6', got {value!r}")
        bounds[key] = value
    tolerance = raw.get("tolerance")
    if tolerance is not None:
        if not isinstance(tolerance, dict) or set(tolerance) != {"rtol", "atol"} or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
            for v in tolerance.values()
        ):
            _fail(path, eid, "tolerance", "expected {rtol = <number>, atol = <number>}")
    skips = []
    for i, s in enumerate(raw.get("skip", [])):
        fname = f"skip[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("reason"), str) or not s["reason"]:
            _fail(path, eid, f"{fname}.reason", "every skip needs a written reason")
        conditions = {k: v for k, v in s.items() if k != "reason"}
        bad = set(conditions) - SKIP_CONDITIONS
        if bad:
            _fail(path, eid, f"{fname}.{sorted(bad)[0]}",
                  f"unknown skip condition; allowed: {', '.join(sorted(SKIP_CONDITIONS))}")
        if not conditions:
            _fail(path, eid, fname, "a skip needs at least one condition (amp_dtype, hip, numerics, fake)")
        skips.append(Skip(s["reason"], conditions))
    amp_dtypes = raw.get("amp_dtypes")
    if amp_dtypes is not None:
        if not isinstance(amp_dtypes, list) or not all(d in ("float16", "bfloat16") for d in amp_dtypes):
            _fail(path, eid, "amp_dtypes", "expected a list of 'float16' / 'bfloat16'")
        amp_dtypes = tuple(amp_dtypes)
    error = _string(raw, "error", path, eid)
    if policy == "banned" and not error:
        _fail(path, eid, "error", "a banned op needs the start of its error message")
    note = raw.get("note", "")
    if not isinstance(note, str):
        _fail(path, eid, "note", "expected a string")
    override = raw.get("override", False)
    if not isinstance(override, bool):
        _fail(path, eid, "override", "expected true or false")
    entry = Entry(
        id=eid, op=op, category=category_name, policy=policy, namespace=namespace, method=method,
        args=args, kwargs=kwargs, expect=expect, cast=cast, expect_outside=expect_outside,
        since=bounds["since"], until=bounds["until"], tolerance=tolerance, skips=tuple(skips),
        amp_dtypes=amp_dtypes, error=error, note=note, path=str(path), device=device,
        extra={"override": override},
    )
    if entry.version_gap() is None and not variants(entry):
        where = entry.qualname if entry.namespace not in (None, "Tensor") else f"Tensor.{op}"
        _fail(path, eid, "op", f"unknown op: {where} does not exist in torch {torch.__version__}")
    return entry


def read_file(path: Path | str) -> tuple[dict, list[Entry]]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OpListError(path, None, None, "no such op-list file") from None
    except tomllib.TOMLDecodeError as exc:
        raise OpListError(path, None, None, f"not valid TOML: {exc}") from None
    unknown = set(data) - {"list", "entry"}
    if unknown:
        _fail(path, None, sorted(unknown)[0], "unknown top-level table; allowed: [list], [[entry]]")
    meta = data.get("list")
    if not isinstance(meta, dict):
        _fail(path, None, "list", "missing [list] table with the device it describes")
    bad = set(meta) - LIST_KEYS
    if bad:
        _fail(path, None, f"list.{sorted(bad)[0]}", f"unknown field; allowed: {', '.join(sorted(LIST_KEYS))}")
    device = meta.get("device")
    if not isinstance(device, str) or not device:
        _fail(path, None, "list.device", "expected the device type this list describes")
    default = meta.get("default_amp_dtype")
    if default is not None and default not in ("float16", "bfloat16"):
        _fail(path, None, "list.default_amp_dtype", "expected 'float16' or 'bfloat16'")
    raw_entries = data.get("entry", [])
    if not isinstance(raw_entries, list):
        _fail(path, None, "entry", "expected [[entry]] tables")
    entries = [parse_entry(raw, path, i, device) for i, raw in enumerate(raw_entries)]
    return meta, entries


def builtin_dir() -> Path:
    """The op lists shipped with the package (``oplists/`` in a checkout)."""
    spec = importlib.util.find_spec("amp_conformance.oplists")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location, "cpu.toml").is_file():
                return Path(location)
    return Path(__file__).resolve().parent.parent / "oplists"


MESSAGES_FILE = "messages.toml"


def builtin_files() -> list[Path]:
    """The shipped op-list files (every TOML file but the messages)."""
    return [p for p in sorted(builtin_dir().glob("*.toml")) if p.name != MESSAGES_FILE]


def builtin_devices() -> list[str]:
    devices = set()
    for path in builtin_files():
        meta, _ = read_file(path)
        devices.add(meta["device"])
    return sorted(devices)


def load(device: str, extra: Iterable[Path | str] = ()) -> OpList:
    """Merge the built-in lists for ``device`` with ``extra`` files (in order).

    A duplicate id is an error unless the later entry says ``override = true``, which
    replaces the earlier entry; ``override`` on an id that does not exist is an error.
    """
    paths = builtin_files()
    merged: dict[str, Entry] = {}
    default = None
    used = []
    for path in [*paths, *map(Path, extra)]:
        meta, entries = read_file(path)
        if meta["device"] != device:
            continue
        used.append(str(path))
        default = meta.get("default_amp_dtype", default)
        seen_here = set()
        for entry in entries:
            if entry.id in seen_here:
                _fail(path, entry.id, "id", "duplicate id in this file")
            seen_here.add(entry.id)
            if entry.extra["override"]:
                if entry.id not in merged:
                    _fail(path, entry.id, "override", "overrides an id that no earlier list defines")
            elif entry.id in merged:
                _fail(path, entry.id, "id",
                      f"duplicate id (first defined in {merged[entry.id].path}); "
                      "set override = true to replace it")
            merged[entry.id] = entry
    return OpList(device, default, tuple(merged.values()), tuple(used))
