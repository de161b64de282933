"""Load and validate declarative op lists (TOML, data only).

Every problem is reported as a line naming the file, the entry id and the field, and all
the problems of a file come in one :class:`OpListError`, so a vendor editing a list never
sees a traceback from deep inside nor fixes one mistake per run. The entry fields are
declared in :mod:`amp_conformance.schema.fields`; this module walks that table and adds
the rules that span fields, files and the merge.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from amp_conformance.schema import argspec, fields, validators
from amp_conformance.schema.categories import CATEGORIES, DEFAULT_CAST, DEFAULT_EXPECT
from amp_conformance.schema.defects import DefectUse
from amp_conformance.schema.exclusions import Drop, Exclusion, exclusion_of, parse_drops
from amp_conformance.schema.fields import Skip
from amp_conformance.schema.location import builtin_dir
from amp_conformance.schema.problems import BAD, OpListError, Problem, Problems
from amp_conformance.schema.versions import check_bounds, release, version_gap

#: Names other modules import from here (the loader's public face).
__all__ = [
    "ENTRY_KEYS", "Drop", "Entry", "Exclusion", "ListFile", "OpList", "OpListError", "Problem",
    "Skip", "builtin_devices", "builtin_dir", "builtin_files", "load", "module_for",
    "parse_entry", "parse_file", "read_file", "release", "variants",
]

ENTRY_KEYS = frozenset(fields.ENTRY_KEYS)
LIST_KEYS = ("device", "default_amp_dtype", "source", "description", "derive_from", "drop",
             "imports")
#: an op of an operator library, named with its library: ``torchvision::roi_align``
LIBRARY_OP = re.compile(r"^(?P<library>[A-Za-z_]\w*)::(?P<op>[A-Za-z_]\w*)$")
LIBRARY_NAMESPACE = "torch.ops."
SKIP_CONDITIONS = frozenset(fields.SKIP_CONDITIONS)
CASTS = validators.CASTS
_TOP_KEYS = ("list", "entry", "exclude")


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
    #: a regular expression the error raised outside autocast must match
    #: (``expect_outside = "error"``)
    error_outside: str | None = None
    #: why a kernel that casts nothing cannot fail this entry (see tests/test_vacuity.py)
    passthrough: str | None = None
    note: str = ""
    #: None: the backward check applies; a string: why the op is not differentiable
    backward: str | None = None
    #: PyTorch's own departure from ``expect`` here (schema.defects), if any
    reference_defect: DefectUse | None = None
    #: PyTorch's own departure in the compiled tier (schema.fields.CompiledDefect), if any
    compiled_defect: fields.CompiledDefect | None = None
    #: replaces the entry of the same id from an earlier file or the base list
    override: bool = False
    path: str = ""
    device: str = ""

    def version_gap(self, version: str | None = None) -> str | None:
        """Why this entry does not apply to the running torch, or None if it does."""
        return version_gap(self.since, self.until, version)

    @property
    def library(self) -> str | None:
        """The operator library of an op named ``library::op``, else None (torch's own)."""
        namespace = self.namespace or ""
        return namespace[len(LIBRARY_NAMESPACE):] if namespace.startswith(LIBRARY_NAMESPACE) \
            else None

    @property
    def qualname(self) -> str:
        if self.namespace is None or self.namespace == "Tensor":
            return f"Tensor.{self.op}"
        return f"{self.namespace}.{self.op}"


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

    @property
    def libraries(self) -> frozenset[str]:
        """The operator libraries its entries name (``op = "<library>::<op>"``)."""
        return frozenset(e.library for e in self.entries if e.library is not None)


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
    want_method = entry.method if entry.method is not None else entry.library is None
    if want_method and hasattr(torch.Tensor, entry.op):
        name = entry.op

        def method(first, *rest, **kwargs):
            return getattr(first, name)(*rest, **kwargs)

        found.append((f"Tensor.{entry.op}", method))
    elif entry.method is True and not hasattr(torch.Tensor, entry.op):
        return []
    return found


def parse_entry(raw: Any, path: Path | str, index: int, device: str) -> Entry:
    """One ``[[entry]]`` table; raises OpListError listing every problem of it."""
    problems = Problems(path)
    entry = _entry(raw, index, device, problems)
    problems.raise_any()
    assert entry is not None
    return entry


def _entry(raw: Any, index: int, device: str, problems: Problems) -> Entry | None:
    """Walk the field table over ``raw``, then the cross-field rules; None on a problem."""
    if not isinstance(raw, dict):
        problems.add(f"#{index}", None, "an entry must be a table ([[entry]])")
        return None
    eid = raw.get("id")
    label = eid if isinstance(eid, str) and validators.ID.match(eid) else f"#{index}"
    before = len(problems.items)
    for key in sorted(set(raw) - ENTRY_KEYS):
        problems.add(label, key, f"unknown field; allowed: {', '.join(fields.ENTRY_KEYS)}")
    values: dict[str, Any] = {}
    for f in fields.ENTRY_FIELDS:
        try:
            values[f.attribute] = f.value(raw)
        except validators.Invalid as exc:
            problems.invalid(label, f.key, exc)
            values[f.attribute] = BAD
    _cross_field_rules(values, label, problems)
    if len(problems.items) > before:
        return None
    entry = Entry(**values, path=problems.path, device=device)
    if entry.version_gap() is None and not variants(entry):
        where = entry.qualname if entry.namespace not in (None, "Tensor") else f"Tensor.{entry.op}"
        problems.add(label, "op", f"unknown op: {where} does not exist in torch {torch.__version__}")
        return None
    return entry


def _cross_field_rules(values: dict[str, Any], label: str, problems: Problems) -> None:
    """The rules no single field states: the category's defaults (namespace, expect, cast),
    what a banned op needs, and version bounds that leave some version."""
    check_bounds(values["since"], values["until"], label, "entry", problems)
    name = values["category"]
    if name is BAD:
        values["policy"] = BAD
        return
    category = CATEGORIES[name]
    policy = values["policy"] = category.policy
    named = LIBRARY_OP.match(values["op"]) if isinstance(values["op"], str) else None
    if named and values["namespace"] is not None:
        problems.add(label, "namespace", f"{values['op']} names its library: it is looked up in "
                                         f"torch.ops.{named['library']}; leave namespace out")
    elif named:
        values["op"], values["namespace"] = named["op"], LIBRARY_NAMESPACE + named["library"]
    elif values["namespace"] is None:
        values["namespace"] = category.namespace
    if values["cast"] is None:
        values["cast"] = DEFAULT_CAST[policy]
    if values["expect"] is None:
        values["expect"] = DEFAULT_EXPECT[policy]
        if values["expect"] is None:
            problems.add(label, "expect", f"category {name} needs an explicit expected dtype")
    if policy == "banned" and values["expect"] not in ("error", BAD):
        problems.add(label, "expect", "a banned op is expected to raise: expect = 'error'")
    if policy == "banned" and values["error"] is None:
        problems.add(label, "error", "a banned op needs the start of its error message")
    if values["expect_outside"] == "error" and values["error_outside"] is None:
        problems.add(label, "error_outside", 'expect_outside = "error" needs the pattern of '
                                             "the error message observed outside autocast")


def _read(path: Path) -> dict[str, Any]:
    """The file's TOML data; an OpListError naming the file when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OpListError(path, None, None, "no such op-list file") from None
    except IsADirectoryError:
        raise OpListError(path, None, None, "is a directory, not an op-list file") from None
    except UnicodeDecodeError as exc:
        raise OpListError(path, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start}); "
                                            "an op list is a UTF-8 TOML file") from None
    except OSError as exc:
        raise OpListError(path, None, None, f"cannot be read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise OpListError(path, None, None, f"not valid TOML: {exc}") from None


def _parse_meta(data: dict, problems: Problems) -> dict[str, Any]:
    """The ``[list]`` table (empty when missing, its problems recorded)."""
    meta = data.get("list")
    if not isinstance(meta, dict):
        problems.add(None, "list", "missing [list] table with the device it describes")
        return {}
    for key in sorted(set(meta) - set(LIST_KEYS)):
        problems.add(None, f"list.{key}", f"unknown field; allowed: {', '.join(LIST_KEYS)}")
    device = meta.get("device")
    if not isinstance(device, str) or not device:
        problems.add(None, "list.device", "expected the device type this list describes")
    default = meta.get("default_amp_dtype")
    if default is not None and default not in validators.AMP_DTYPES:
        problems.add(None, "list.default_amp_dtype",
                     f"unknown autocast dtype {default!r}; allowed: {', '.join(validators.AMP_DTYPES)}")
    _import(meta.get("imports", []), problems)
    base = meta.get("derive_from")
    if base is not None and (not isinstance(base, str) or not base or base == device):
        problems.add(None, "list.derive_from",
                     f"expected the device type of another list to start from, got {base!r}")
    return meta


def _import(modules: Any, problems: Problems) -> None:
    """Import the modules that define the list's library ops (``imports``), before its
    entries are looked up."""
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        problems.add(None, "list.imports", f"expected a list of module names, got {modules!r}")
        return
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - whatever a library's import raises
            problems.add(None, "list.imports", f"cannot import {module}: "
                                               f"{type(exc).__name__}: {exc}")


def _tables(data: dict, key: str, problems: Problems) -> list:
    raw = data.get(key, [])
    if not isinstance(raw, list):
        problems.add(None, key, f"expected [[{key}]] tables")
        return []
    return raw


def parse_file(path: Path | str) -> ListFile:
    """Parse and validate one op-list file (entries, exclusions, derivation); an
    OpListError lists every problem of the file."""
    path = Path(path)
    data = _read(path)
    try:
        argspec.max_elements()
    except ValueError as exc:
        raise OpListError(path, None, None, str(exc)) from None
    problems = Problems(path)
    for key in sorted(set(data) - set(_TOP_KEYS)):
        problems.add(None, key, "unknown top-level table; allowed: [list], [[entry]], [[exclude]]")
    meta = _parse_meta(data, problems)
    device = meta.get("device", "")
    drops = parse_drops(meta, problems)
    entries: dict[str, Entry] = {}
    ids: set[str] = set()  # of every entry, valid or not
    for i, raw in enumerate(_tables(data, "entry", problems)):
        entry = _entry(raw, i, device, problems)
        eid = raw.get("id") if isinstance(raw, dict) else None
        if not isinstance(eid, str):
            continue  # its problem is recorded
        if eid in ids:
            problems.add(eid, "id", "duplicate id in this file")
        elif entry is not None:
            entries[eid] = entry
        ids.add(eid)
    exclusions: dict[str, Exclusion] = {}
    for i, raw in enumerate(_tables(data, "exclude", problems)):
        exclusion = exclusion_of(raw, i, device, problems)
        if exclusion is not None and exclusion.overload in exclusions:
            problems.add(exclusion.overload, "overload", "duplicate exclusion in this file",
                         "exclude")
        elif exclusion is not None:
            exclusions[exclusion.overload] = exclusion
    problems.raise_any()
    return ListFile(str(path), meta, tuple(entries.values()), tuple(exclusions.values()), drops)


def read_file(path: Path | str) -> tuple[dict, list[Entry]]:
    """The ``[list]`` table and entries of one file (see parse_file for everything)."""
    parsed = parse_file(path)
    return dict(parsed.meta), list(parsed.entries)


MESSAGES_FILE = "messages.toml"
#: shipped TOML files that are not op lists: the messages, the reference defects and the
#: OpInfo tier's departures (schema.departures)
NOT_OPLISTS = (MESSAGES_FILE, "defects.toml", "opinfo.toml", "transforms.toml", "modules.toml")


def builtin_files() -> list[Path]:
    """The shipped op-list files (every TOML file but the messages and the defects)."""
    return [p for p in sorted(builtin_dir().glob("*.toml")) if p.name not in NOT_OPLISTS]


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


def load_only(device: str, extra: Iterable[Path | str] = ()) -> OpList:
    """:func:`load`, refusing an ``extra`` file that describes another device than
    ``device`` (load leaves such a file out, which a command given it would hide)."""
    extra = tuple(map(Path, extra))
    lists = load(device, extra)
    unused = [str(p) for p in extra if str(p) not in set(lists.paths)]
    if unused:
        raise OpListError(unused[0], errors=[Problem(
            p, None, None, f"describes another device than {device!r}: its [list] device is "
                           f"{parse_file(p).device!r}") for p in unused])
    return lists


def _parse_all(paths: Iterable[Path]) -> list[ListFile]:
    """Every file parsed; one OpListError with the problems of all that have any."""
    files, problems = [], []
    for path in paths:
        try:
            files.append(parse_file(path))
        except OpListError as exc:
            problems.extend(exc.errors)
    if problems:
        raise OpListError(problems[0].path, errors=problems)
    return files


@dataclass
class _Merge:
    """The merged state of a device's lists while they are folded in, file by file."""

    entries: dict[str, Entry]
    exclusions: dict[str, Exclusion]
    default: str | None = None
    derived_from: str | None = None

    def add(self, f: ListFile, inherited: set[str], problems: Problems) -> None:
        """Fold in one file: its entries (override rules) and exclusions."""
        self.default = f.meta.get("default_amp_dtype", self.default)
        for entry in f.entries:
            if entry.override and entry.id not in self.entries:
                problems.add(entry.id, "override", "overrides an id that no earlier list defines",
                             path=f.path)
                continue
            if not entry.override and entry.id in self.entries:
                hint = (f"inherited from {self.derived_from}; set override = true to replace it"
                        if entry.id in inherited else "set override = true to replace it")
                problems.add(entry.id, "id", f"duplicate id (first defined in "
                                             f"{self.entries[entry.id].path}); {hint}", path=f.path)
                continue
            self.entries[entry.id] = entry
        for exclusion in f.exclusions:
            if exclusion.overload in self.exclusions:
                first = self.exclusions[exclusion.overload].path
                problems.add(exclusion.overload, "overload",
                             f"duplicate exclusion (first in {first})", "exclude", path=f.path)
                continue
            self.exclusions[exclusion.overload] = exclusion

    def drop(self, f: ListFile, problems: Problems) -> list[Drop]:
        """Apply one derived file's drops to the base entries and exclusions."""
        done = []
        for i, drop in enumerate(f.drops):
            where = f"list.drop[{i}]"
            if drop.id is not None and self.entries.pop(drop.id, None) is None:
                problems.add(None, f"{where}.id",
                             f"{drop.id!r} is no entry of the {self.derived_from} list", path=f.path)
            elif drop.id is None and self.exclusions.pop(drop.overload, None) is None:
                problems.add(None, f"{where}.overload", f"{drop.overload!r} is no exclusion of "
                                                        f"the {self.derived_from} list", path=f.path)
            else:
                done.append(drop)
        return done


def _load(device: str, extra: tuple[Path, ...], chain: tuple[str, ...]) -> OpList:
    files = _parse_all([*builtin_files(), *extra])
    mine = [f for f in files if f.device == device]
    bases = {f.derive_from: f for f in mine if f.derive_from}
    if len(bases) > 1:
        first, second = list(bases.values())[:2]
        raise OpListError(second.path, None, "list.derive_from",
                          f"derives {device} from {second.derive_from!r}, but {first.path} "
                          f"derives it from {first.derive_from!r}")
    merge = _Merge({}, {})
    used: list[str] = []
    drops: list[Drop] = []
    problems = Problems()
    if bases:
        ((merge.derived_from, origin),) = bases.items()
        if merge.derived_from in chain or merge.derived_from == device:
            raise OpListError(origin.path, None, "list.derive_from", "circular derivation: "
                              f"{' -> '.join([*chain, device, merge.derived_from])}")
        base = _load(merge.derived_from, (), (*chain, device))
        if not base.entries:
            raise OpListError(origin.path, None, "list.derive_from",
                              f"no built-in list describes {merge.derived_from!r}")
        used.extend(base.paths)
        merge.default = base.default_amp_dtype
        merge.entries = {e.id: replace(e, device=device) for e in base.entries}
        merge.exclusions = {x.overload: replace(x, device=device) for x in base.exclusions}
        for f in mine:
            drops.extend(merge.drop(f, problems))
    inherited = set(merge.entries)
    for f in mine:
        used.append(f.path)
        merge.add(f, inherited, problems)
    problems.raise_any()
    return OpList(device, merge.default, tuple(merge.entries.values()), tuple(used),
                  tuple(merge.exclusions.values()), merge.derived_from, tuple(drops))
