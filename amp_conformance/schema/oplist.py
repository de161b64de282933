"""Load and validate declarative op lists (TOML, data only).

Every problem is reported as an :class:`OpListError` naming the file, the entry id
and the field, so a vendor editing a list never sees a traceback from deep inside.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.torch_version import TorchVersion

from amp_conformance.checks import registry
from amp_conformance.schema import argspec
from amp_conformance.schema.categories import CATEGORIES, DEFAULT_CAST, DEFAULT_EXPECT, NAMESPACES

ENTRY_KEYS = {
    "id", "op", "category", "namespace", "method", "args", "kwargs", "expect", "cast",
    "expect_outside", "since", "until", "tolerance", "skip", "amp_dtypes", "error", "note",
    "override",
}
LIST_KEYS = {"device", "default_amp_dtype", "source", "description", "derive_from", "drop"}
EXCLUDE_KEYS = {"overload", "reason", "since", "until"}
DROP_KEYS = {"id", "overload", "reason"}
SKIP_CONDITIONS = {"amp_dtype", "hip", "numerics", "fake", "check"}
#: what the numerics control casts eligible inputs to: the autocast dtype, a fixed dtype
#: (for kernels that ignore the autocast dtype, e.g. cuDNN RNNs always run in float16),
#: the widest input type, or nothing
CASTS = ("amp", "float32", "float16", "bfloat16", "widest", "none")
_ID = re.compile(r"^[A-Za-z0-9_.+-]+$")
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
#: A dispatcher operator name with an optional overload: ``aten::norm.Scalar``.
_OVERLOAD = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


class OpListError(ValueError):
    """A malformed op list: the message names the file, entry id and field."""

    def __init__(
        self, path: Path | str, entry: str | None, field: str | None, message: str,
        kind: str = "entry",
    ):
        where = str(path)
        if entry is not None:
            where += f": {kind} {entry!r}"
        if field is not None:
            where += f": field {field!r}"
        super().__init__(f"{where}: {message}")
        self.path, self.entry, self.field = str(path), entry, field
        self.kind = kind


def release(version: str | None = None) -> TorchVersion:
    """The release a torch version is compared as in since/until bounds: its numeric part.

    A nightly (``2.15.0.dev20260101``) or source build (``2.15.0a0+git…``) already carries
    what lands in 2.15.0, so it counts as 2.15.0 (PEP 440 would order it before 2.15).
    """
    v = version or torch.__version__
    return TorchVersion(re.match(r"\d+(\.\d+)*", v).group())


def _version_gap(since: str | None, until: str | None, version: str | None) -> str | None:
    v, r = version or torch.__version__, release(version)
    if since and r < since:
        return f"not applicable: needs torch >= {since}, running {v}"
    if until and r >= until:
        return f"not applicable: removed in torch {until}, running {v}"
    return None


@dataclass(frozen=True)
class Skip:
    reason: str
    conditions: Mapping[str, Any]

    def applies(self, amp_dtype: torch.dtype, numerics: str, fake: bool, check: str | None) -> bool:
        values = {
            "amp_dtype": str(amp_dtype).removeprefix("torch."),
            "hip": torch.version.hip is not None,
            "numerics": numerics,
            "fake": fake,
            "check": check,
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
    #: the output dtype, or one per output tensor (a tuple) for mixed outputs
    expect: str | tuple[str, ...]
    cast: str
    expect_outside: str | tuple[str, ...]
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
        return _version_gap(self.since, self.until, version)

    @property
    def qualname(self) -> str:
        if self.namespace is None or self.namespace == "Tensor":
            return f"Tensor.{self.op}"
        return f"{self.namespace}.{self.op}"


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

    def version_gap(self, version: str | None = None) -> str | None:
        """Why this exclusion does not apply to the running torch, or None if it does."""
        return _version_gap(self.since, self.until, version)


@dataclass(frozen=True)
class Drop:
    """An entry (``id``) or exclusion (``overload``) of the base list a derived list removes."""

    id: str | None
    overload: str | None
    reason: str


@dataclass(frozen=True)
class ListFile:
    """One parsed op-list file: its ``[list]`` table, entries and exclusions."""

    path: str
    meta: Mapping[str, Any]
    entries: tuple[Entry, ...]
    exclusions: tuple[Exclusion, ...]
    drops: tuple[Drop, ...] = ()

    @property
    def device(self) -> str:
        return self.meta["device"]

    @property
    def derive_from(self) -> str | None:
        return self.meta.get("derive_from")


@dataclass(frozen=True)
class OpList:
    device: str
    default_amp_dtype: str | None
    entries: tuple[Entry, ...]
    paths: tuple[str, ...]
    #: Overloads deliberately left unexercised, each with its reason (see Exclusion).
    exclusions: tuple[Exclusion, ...] = ()
    #: The device whose lists this one starts from (``[list] derive_from``), if any.
    derived_from: str | None = None
    #: What the derivation removed from the base list, with reasons.
    drops: tuple[Drop, ...] = ()


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


def _dtype_list(raw, key, path, eid) -> tuple[str, ...]:
    """One dtype per output tensor, in order (ops returning values and indices or info);
    a last "..." leaves the remaining outputs (bookkeeping such as RNG state) unchecked."""
    items = raw[key]
    if not items or items[0] == "...":
        _fail(path, eid, key, "give one dtype per output tensor (at least the first)")
    if "..." in items[:-1]:
        _fail(path, eid, key, "'...' may only stand last, for the outputs not checked")
    return tuple(
        d if d == "..." else _dtype_or({key: d}, key, path, eid, ["amp", "widest"]) for d in items
    )


def parse_entry(raw: Any, path: Path | str, index: int, device: str) -> Entry:
    if not isinstance(raw, dict):
        _fail(path, f"#{index}", None, "an entry must be a table ([[entry]])")
    eid = raw.get("id")
    if not isinstance(eid, str) or not _ID.match(eid):
        _fail(path, f"#{index}", "id", f"expected an id of letters, digits and _.+-, got {eid!r}")
    unknown = set(raw) - ENTRY_KEYS
    if unknown:
        _fail(path, eid, sorted(unknown)[0],
              f"unknown field; allowed: {', '.join(sorted(ENTRY_KEYS))}")
    op = _string(raw, "op", path, eid, required=True)
    category_name = _string(raw, "category", path, eid, required=True, choices=list(CATEGORIES))
    category = CATEGORIES[category_name]
    namespace = raw.get("namespace", category.namespace)
    if namespace is not None and namespace not in NAMESPACES:
        _fail(path, eid, "namespace",
              f"unknown namespace {namespace!r}; allowed: {', '.join(NAMESPACES)}")
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
    if isinstance(raw.get("expect"), list):
        expect = _dtype_list(raw, "expect", path, eid)
    else:
        expect = _dtype_or(raw, "expect", path, eid, ["amp", "widest", "error", "none"])
    expect = expect or DEFAULT_EXPECT[policy]
    if expect is None:
        _fail(path, eid, "expect", f"category {category_name} needs an explicit expected dtype")
    if policy == "banned" and expect != "error":
        _fail(path, eid, "expect", "a banned op is expected to raise: expect = 'error'")
    cast = _string(raw, "cast", path, eid, choices=CASTS) or DEFAULT_CAST[policy]
    if isinstance(raw.get("expect_outside"), list):
        expect_outside = _dtype_list(raw, "expect_outside", path, eid)
    else:
        expect_outside = _dtype_or(raw, "expect_outside", path, eid,
                                   ["inputs", "amp", "none", "error"])
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
            _fail(path, eid, fname,
                  "a skip needs at least one condition (amp_dtype, hip, numerics, fake, check)")
        if "check" in conditions and conditions["check"] not in registry.names(per_entry=True):
            _fail(path, eid, f"{fname}.check",
                  f"unknown check {conditions['check']!r}; the per-entry checks are: "
                  f"{', '.join(registry.names(per_entry=True))}")
        skips.append(Skip(s["reason"], conditions))
    amp_dtypes = raw.get("amp_dtypes")
    if amp_dtypes is not None:
        if not isinstance(amp_dtypes, list) or not all(
            d in ("float16", "bfloat16") for d in amp_dtypes
        ):
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


def _known_overloads() -> frozenset[str]:
    return frozenset(torch._C._dispatch_get_all_op_names())


def parse_exclusion(raw: Any, path: Path | str, index: int, device: str) -> Exclusion:
    """One ``[[exclude]]`` table: an overload, the written reason, optional version bounds."""
    def fail(name: str | None, field_name: str | None, message: str):
        raise OpListError(path, name, field_name, message, kind="exclude")

    if not isinstance(raw, dict):
        fail(f"#{index}", None, "an exclusion must be a table ([[exclude]])")
    overload = raw.get("overload")
    if not isinstance(overload, str) or not _OVERLOAD.match(overload):
        fail(f"#{index}", "overload",
             f"expected an operator overload like 'aten::norm.Scalar', got {overload!r}")
    unknown = set(raw) - EXCLUDE_KEYS
    if unknown:
        fail(overload, sorted(unknown)[0],
             f"unknown field; allowed: {', '.join(sorted(EXCLUDE_KEYS))}")
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        fail(overload, "reason", "every exclusion needs a written reason")
    bounds = {}
    for key in ("since", "until"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, str) or not _VERSION.match(value)):
            fail(overload, key, f"expected a version like '2.6', got {value!r}")
        bounds[key] = value
    exclusion = Exclusion(overload, reason, bounds["since"], bounds["until"], str(path), device)
    if exclusion.version_gap() is None and overload not in _known_overloads():
        fail(overload, "overload",
             f"unknown overload: the dispatcher of torch {torch.__version__} has no {overload}")
    return exclusion


def _parse_drops(meta: dict, path: Path) -> tuple[Drop, ...]:
    raw = meta.get("drop", [])
    if not isinstance(raw, list):
        _fail(path, None, "list.drop", "expected an array of {id = ..., reason = ...} tables")
    drops = []
    for i, d in enumerate(raw):
        where = f"list.drop[{i}]"
        if not isinstance(d, dict):
            _fail(path, None, where, "expected a table {id = ..., reason = ...}")
        unknown = set(d) - DROP_KEYS
        if unknown:
            _fail(path, None, f"{where}.{sorted(unknown)[0]}",
                  f"unknown field; allowed: {', '.join(sorted(DROP_KEYS))}")
        if ("id" in d) == ("overload" in d):
            _fail(path, None, where, "a drop names exactly one of 'id' (an entry) or "
                                     "'overload' (an exclusion) of the base list")
        target = d.get("id", d.get("overload"))
        if not isinstance(target, str) or not target:
            _fail(path, None, f"{where}.{'id' if 'id' in d else 'overload'}",
                  f"expected a non-empty string, got {target!r}")
        reason = d.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            _fail(path, None, f"{where}.reason", "every drop needs a written reason")
        drops.append(Drop(d.get("id"), d.get("overload"), reason))
    if drops and not meta.get("derive_from"):
        _fail(path, None, "list.drop", "drop only applies to a list with derive_from")
    return tuple(drops)


def parse_file(path: Path | str) -> ListFile:
    """Parse and validate one op-list file (entries, exclusions, derivation)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OpListError(path, None, None, "no such op-list file") from None
    except tomllib.TOMLDecodeError as exc:
        raise OpListError(path, None, None, f"not valid TOML: {exc}") from None
    unknown = set(data) - {"list", "entry", "exclude"}
    if unknown:
        _fail(path, None, sorted(unknown)[0],
              "unknown top-level table; allowed: [list], [[entry]], [[exclude]]")
    meta = data.get("list")
    if not isinstance(meta, dict):
        _fail(path, None, "list", "missing [list] table with the device it describes")
    bad = set(meta) - LIST_KEYS
    if bad:
        _fail(path, None, f"list.{sorted(bad)[0]}",
              f"unknown field; allowed: {', '.join(sorted(LIST_KEYS))}")
    device = meta.get("device")
    if not isinstance(device, str) or not device:
        _fail(path, None, "list.device", "expected the device type this list describes")
    default = meta.get("default_amp_dtype")
    if default is not None and default not in ("float16", "bfloat16"):
        _fail(path, None, "list.default_amp_dtype", "expected 'float16' or 'bfloat16'")
    base = meta.get("derive_from")
    if base is not None and (not isinstance(base, str) or not base or base == device):
        _fail(path, None, "list.derive_from",
              f"expected the device type of another list to start from, got {base!r}")
    drops = _parse_drops(meta, path)
    raw_entries = data.get("entry", [])
    if not isinstance(raw_entries, list):
        _fail(path, None, "entry", "expected [[entry]] tables")
    entries = []
    seen = set()
    for i, raw in enumerate(raw_entries):
        entry = parse_entry(raw, path, i, device)
        if entry.id in seen:
            _fail(path, entry.id, "id", "duplicate id in this file")
        seen.add(entry.id)
        entries.append(entry)
    raw_excludes = data.get("exclude", [])
    if not isinstance(raw_excludes, list):
        _fail(path, None, "exclude", "expected [[exclude]] tables")
    exclusions = []
    excluded = set()
    for i, raw in enumerate(raw_excludes):
        exclusion = parse_exclusion(raw, path, i, device)
        if exclusion.overload in excluded:
            raise OpListError(path, exclusion.overload, "overload",
                              "duplicate exclusion in this file", kind="exclude")
        excluded.add(exclusion.overload)
        exclusions.append(exclusion)
    return ListFile(str(path), meta, tuple(entries), tuple(exclusions), drops)


def read_file(path: Path | str) -> tuple[dict, list[Entry]]:
    """The ``[list]`` table and entries of one file (see parse_file for everything)."""
    parsed = parse_file(path)
    return dict(parsed.meta), list(parsed.entries)


def builtin_dir() -> Path:
    """The op lists shipped with the package (``oplists/`` in a checkout)."""
    spec = importlib.util.find_spec("amp_conformance.oplists")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location, "cpu.toml").is_file():
                return Path(location)
    return Path(__file__).resolve().parents[2] / "oplists"  # a checkout: amp_conformance/schema/..


MESSAGES_FILE = "messages.toml"


def builtin_files() -> list[Path]:
    """The shipped op-list files (every TOML file but the messages)."""
    return [p for p in sorted(builtin_dir().glob("*.toml")) if p.name != MESSAGES_FILE]


def builtin_devices() -> list[str]:
    devices = set()
    for path in builtin_files():
        devices.add(parse_file(path).device)
    return sorted(devices)


def load(device: str, extra: Iterable[Path | str] = ()) -> OpList:
    """Merge the built-in lists for ``device`` with ``extra`` files (in order).

    A duplicate id is an error unless the later entry says ``override = true``, which
    replaces the earlier entry; ``override`` on an id that does not exist is an error.
    A list with ``[list] derive_from = "<base>"`` starts from the base device's built-in
    lists (entries and exclusions), minus what its ``drop`` tables remove, each with a
    reason; its own entries then add to or override them.
    """
    return _load(device, tuple(map(Path, extra)), ())


def _load(device: str, extra: tuple[Path, ...], chain: tuple[str, ...]) -> OpList:
    files = [parse_file(p) for p in [*builtin_files(), *extra]]
    mine = [f for f in files if f.device == device]
    bases = {f.derive_from: f for f in mine if f.derive_from}
    if len(bases) > 1:
        first, second = list(bases.values())[:2]
        _fail(second.path, None, "list.derive_from",
              f"derives {device} from {second.derive_from!r}, but {first.path} derives it "
              f"from {first.derive_from!r}")
    merged: dict[str, Entry] = {}
    exclusions: dict[str, Exclusion] = {}
    default = None
    used: list[str] = []
    derived_from = None
    drops: list[Drop] = []
    if bases:
        ((derived_from, origin),) = bases.items()
        if derived_from in chain or derived_from == device:
            _fail(origin.path, None, "list.derive_from",
                  f"circular derivation: {' -> '.join([*chain, device, derived_from])}")
        base = _load(derived_from, (), (*chain, device))
        if not base.entries:
            _fail(origin.path, None, "list.derive_from",
                  f"no built-in list describes {derived_from!r}")
        used.extend(base.paths)
        default = base.default_amp_dtype
        merged = {e.id: replace(e, device=device) for e in base.entries}
        exclusions = {x.overload: replace(x, device=device) for x in base.exclusions}
        for f in mine:
            for i, drop in enumerate(f.drops):
                where = f"list.drop[{i}]"
                if drop.id is not None:
                    if merged.pop(drop.id, None) is None:
                        _fail(f.path, None, f"{where}.id",
                              f"{drop.id!r} is no entry of the {derived_from} list")
                elif exclusions.pop(drop.overload, None) is None:
                    _fail(f.path, None, f"{where}.overload",
                          f"{drop.overload!r} is no exclusion of the {derived_from} list")
                drops.append(drop)
    inherited = set(merged)
    for f in mine:
        used.append(f.path)
        default = f.meta.get("default_amp_dtype", default)
        for entry in f.entries:
            if entry.extra["override"]:
                if entry.id not in merged:
                    _fail(f.path, entry.id, "override",
                          "overrides an id that no earlier list defines")
            elif entry.id in merged:
                hint = (f"inherited from {derived_from}; set override = true to replace it"
                        if entry.id in inherited else "set override = true to replace it")
                _fail(f.path, entry.id, "id",
                      f"duplicate id (first defined in {merged[entry.id].path}); {hint}")
            merged[entry.id] = entry
        for exclusion in f.exclusions:
            if exclusion.overload in exclusions:
                raise OpListError(
                    f.path, exclusion.overload, "overload",
                    f"duplicate exclusion (first in {exclusions[exclusion.overload].path})",
                    kind="exclude",
                )
            exclusions[exclusion.overload] = exclusion
    return OpList(device, default, tuple(merged.values()), tuple(used), tuple(exclusions.values()),
                  derived_from, tuple(drops))
