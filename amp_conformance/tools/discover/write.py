"""Writing what discover observed: an op list (TOML) for the device and the diff against
the reference."""


from __future__ import annotations

import re
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from amp_conformance.core import devices
from amp_conformance.schema import argspec, fields, oplist
from amp_conformance.schema.categories import CATEGORIES
from amp_conformance.schema.oplist import Entry
from amp_conformance.tools.discover.observe import (
    LIST_POLICY,
    Row,
)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} as TOML")


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _toml_value(name)


_raw_cache: dict[str, dict[str, dict]] = {}


def raw_entry(entry: Entry) -> dict[str, Any]:
    """The entry's table as written in its file."""
    if entry.path not in _raw_cache:
        data = tomllib.loads(Path(entry.path).read_text(encoding="utf-8"))
        _raw_cache[entry.path] = {e["id"]: e for e in data.get("entry", [])}
    return dict(_raw_cache[entry.path][entry.id])


def category_for(policy: str, namespace: str | None) -> tuple[str, str | None]:
    """The category of ``policy`` for an op called from ``namespace``, and the namespace to
    write explicitly when that category's default differs."""
    wanted = LIST_POLICY[policy]
    matching = [name for name, c in CATEGORIES.items() if c.policy == wanted]
    for name in matching:
        if CATEGORIES[name].namespace == namespace:
            return name, None
    name = next((n for n in matching if n.startswith("torch_")), matching[0])
    return name, ("Tensor" if namespace is None else namespace)


def merge_expect(seen: dict[str, tuple[str, ...] | None], policy: str) -> Any:
    """One ``expect`` value for the output dtypes seen per autocast dtype, or None when no
    single value describes them all.

    An output is written "amp" where it is the autocast dtype under every dtype seen, and
    by name where it is the same under every dtype (a call with an explicit dtype). With
    a single autocast dtype seen both read the same; "amp" is taken for a lower-precision
    op only. ``seen`` None for a dtype means the call raised there ("error").
    """
    if any(v is None for v in seen.values()):
        return "error" if all(v is None for v in seen.values()) else None
    lengths = {len(v) for v in seen.values()}
    if len(lengths) != 1:
        return None
    (n,), names = lengths, []
    if n == 0:
        return "none"  # no tensor out (torch.equal)
    for i in range(n):
        column = {amp: out[i] for amp, out in seen.items()}
        same = len(set(column.values())) == 1
        as_amp = all(out == amp for amp, out in column.items())
        value = next(iter(column.values()))
        if as_amp and (len(column) > 1 or policy == "lower" or not same):
            names.append("amp")
        elif same and value in argspec.DTYPES:
            names.append(value)
        elif same:
            names.append("...")  # a dtype the loader cannot name: check the outputs before it
            break
        else:
            return None
    return names[0] if len(names) == 1 and names[0] != "..." else names


_DROPPED = ("category", "expect", "cast", "note", "override", "namespace", "error", "expect_outside")


def entry_table(row: Row, group: list[str], reference: str, restrict: bool,
                suffix: str = "") -> dict[str, Any] | None:
    """The op-list table for ``row`` observed under the autocast dtypes ``group``, or None
    when no single entry describes them (the caller splits the group)."""
    obs = row.observed[group[0]]
    expect = merge_expect({g: row.observed[g].dtypes for g in group}, obs.policy)
    outside = merge_expect({g: row.observed[g].outside for g in group}, "unchanged")
    if expect is None or outside is None:
        return None
    raw = raw_entry(row.entry)
    table = {k: v for k, v in raw.items() if k not in _DROPPED}
    category, namespace = category_for(obs.policy, row.entry.namespace)
    table["id"] = row.entry.id + suffix
    table["category"] = category
    if row.entry.library is None and (namespace is not None or "namespace" in raw):
        table["namespace"] = namespace or row.entry.namespace  # a library op's is its op's
    default = {"lower": "amp", "fp32": "float32"}.get(obs.policy)
    if obs.policy in ("unchanged", "other") or (default and expect != default) or \
            (obs.policy == "promote" and isinstance(expect, list)):
        table["expect"] = expect
    if obs.policy == "unchanged":
        # autocast did nothing: the control is the same call with autocast off (builtin
        # promotion, which a 0-dim float32 beside lower-precision tensors does not widen)
        table["cast"] = "none"
    if obs.policy == "error":
        table["expect"] = "error"
        table["error"] = obs.message
    if "expect_outside" in raw:  # the reference's, re-derived from what was seen here
        table["expect_outside"] = outside
        seen = list(dict.fromkeys(row.observed[g].outside_error for g in group
                                  if row.observed[g].outside_error))
        if outside == "error" and seen:  # the messages seen (one per dtype), as the pattern
            table["error_outside"] = (re.escape(seen[0]) if len(seen) == 1 else
                                      "(?:" + "|".join(map(re.escape, seen)) + ")")
        elif outside != "error":
            table.pop("error_outside", None)
    if restrict:
        table["amp_dtypes"] = list(group)
    note = f"observed {obs.policy}; {reference}: {row.reference}"
    if obs.policy == "other":
        note += "; review: a dtype change discover cannot name"
    if obs.review:
        note += f"; review: {obs.review}"
    if obs.remark:
        note += f"; {obs.remark}"
    table["note"] = note
    return {k: table[k] for k in fields.ENTRY_KEYS if k in table}  # the schema table's order


def defect_table(row: Row, names: list[str]) -> dict[str, Any]:
    """An entry with a reference defect that the device matched (either way): the
    reference's table as written, its note saying which behaviour each dtype showed."""
    table = {k: v for k, v in raw_entry(row.entry).items() if k not in ("note", "override")}
    seen = ", ".join(f"{n}: {row.observed[n].defect or 'as intended'}" for n in names)
    table["note"] = (f"reference defect {row.entry.reference_defect.id}: {seen}")
    return {k: table[k] for k in fields.ENTRY_KEYS if k in table}


def _overriding(table: dict[str, Any], builtin: set[str]) -> dict[str, Any]:
    """``table`` replacing the device's built-in entry of its id, where there is one (a list
    discovered for cpu, say, is loaded on top of cpu's own lists)."""
    return {**table, "override": True} if table["id"] in builtin else table


def review_item(row: Row, device: str, reference: str, departs: list[str],
                observed: list[dict[str, Any]], builtin: set[str] = frozenset()) -> list[str]:
    """A departure from the reference, written so that it cannot pass by being written down:
    the reference's expectation stays the active entry (the departure fails until a person
    decides), and what the device did follows commented out, to take instead if intended."""
    seen = "; ".join(f"{n}: {row.observed[n].policy}"
                     + (f" ({row.observed[n].review})" if row.observed[n].review else "")
                     for n in departs)
    table = {k: v for k, v in raw_entry(row.entry).items() if k not in ("note", "override")}
    table.update(_outside(observed))
    table["note"] = f"REVIEW: {device} departs from {reference} ({seen}); {reference}'s expectation kept"
    table = _overriding({k: table[k] for k in fields.ENTRY_KEYS if k in table}, builtin)
    observed = [_overriding(t, builtin) for t in observed]
    lines = ["", f"# REVIEW {row.entry.id}: {device} departs from {reference} ({seen}).",
             f"# The {reference} expectation below stays active, so the departure fails until",
             "# reviewed; if it is intended, replace the entry with the observed one after it.",
             "[[entry]]", *(f"{_key(k)} = {_toml_value(v)}" for k, v in table.items())]
    for obs_table in observed:
        lines += ["# [[entry]]  (observed)",
                  *(f"# {_key(k)} = {_toml_value(v)}" for k, v in obs_table.items())]
    return lines


_OUTSIDE = ("expect_outside", "error_outside")


def _outside(observed: list[dict[str, Any]]) -> dict[str, Any]:
    """What every observed table says of the call outside autocast: seen, not the policy
    under review, so the active entry says it too (the reference's would fail test_outside
    for a behaviour no one is asked to review)."""
    said = [{k: t[k] for k in _OUTSIDE if k in t} for t in observed]
    return said[0] if said and all(s == said[0] for s in said) else {}


def listed_table(row: Row, names: list[str]) -> dict[str, Any]:
    """An operator library's entry the device matched: its table as listed (the library's
    own rule; a kernel that computes in float32 and casts back reads as "unchanged" by
    dtypes alone, so the observed policy would not describe it)."""
    table = {k: v for k, v in raw_entry(row.entry).items() if k not in ("note", "override")}
    table["note"] = "observed as listed: " + ", ".join(
        f"{n}: {row.observed[n].policy}" for n in names)
    return {k: table[k] for k in fields.ENTRY_KEYS if k in table}


def library_drafts(device: str, unnamed: dict[str, str]) -> list[str]:
    """Commented draft entries for the device's Autocast kernels of operator libraries that
    no list run names (``{"lib::op": schema}``): what discover cannot know (arguments, the
    category the kernel intends, the module that defines the library) is left to fill in."""
    if not unnamed:
        return []
    lines = ["", f"# Autocast kernels on {device} of operator libraries that no list names (coverage",
             "# calls them foreign). Each draft needs arguments (args, as in docs/oplists.md), the",
             "# category its kernel intends, and the module that defines its library under",
             "# [list] imports; then uncomment it, or run discover again with --oplist LIST.toml."]
    loaded = sorted({n.partition("::")[0] for n in unnamed} & set(sys.modules))
    if loaded:  # a library named as its module is (torchvision; torch_ipex is not)
        lines.append(f"# Imported here, a module of each library's name: imports = {_toml_value(loaded)}")
    for name, schema in unnamed.items():
        library, _, op = name.partition("::")
        lines += ["#", "# [[entry]]", f"# id = {_toml_value(f'{library}-{op}')}",
                  f"# op = {_toml_value(name)}",
                  "# category = \"\"  # torch_16, torch_fp32, torch_need_autocast_promote, ...",
                  f"# args = []  # {schema}"]
    return lines


def _header(device: str, reference: str, command: str, imports: tuple[str, ...]) -> list[str]:
    """The list's opening comment (the command that wrote it) and its ``[list]`` table."""
    lines = [
        f"# Autocast policy of {device}, discovered by `python -m amp_conformance discover "
        f"--device {device}{command} --reference {reference}`",
        f"# on torch {torch.__version__}: each entry of the {reference} op lists, with the policy",
        f"# {device} showed (note = observed policy; {reference}'s). A first draft: review it.",
        "",
        "[list]",
        f"device = {_toml_value(device)}",
    ]
    try:
        default = devices.dtype_name(torch.get_autocast_dtype(device))
        lines.append(f"default_amp_dtype = {_toml_value(default)}")
    except RuntimeError:
        pass
    source = f"discovered on torch {torch.__version__} from the {reference} op lists"
    lines.append(f"source = {_toml_value(source)}")
    if imports:
        lines.append(f"imports = {_toml_value(list(imports))}")
    return lines


def render_list(device: str, reference: str, rows: list[Row], dtypes: list[torch.dtype],
                fake: bool, supported: list[torch.dtype] | None = None,
                backend_modules: list[str] | tuple[str, ...] = (),
                extra: tuple[str, ...] = (), imports: tuple[str, ...] = (),
                unnamed: dict[str, str] | None = None) -> str:
    """The discovered op list (TOML). Entries seen under some of the dtypes the device
    supports only are restricted to those (``amp_dtypes``). The first line records the
    command, backend modules and extra lists included, so that ``review`` can print
    runnable reproductions; ``imports`` are the extra lists' libraries, ``unnamed`` the
    library kernels no list names (:func:`library_drafts`)."""
    every = {devices.dtype_name(d) for d in (supported or dtypes)}
    builtin = {e.id for e in oplist.load(device).entries}
    command = "".join([*(f" --backend-module {m}" for m in backend_modules),
                       *(f" --oplist {p}" for p in extra), " --fake" if fake else ""])
    lines = _header(device, reference, command, imports)
    not_run: list[str] = []
    for row in rows:
        names = [devices.dtype_name(d) for d in dtypes if devices.dtype_name(d) in row.observed]
        if not names:
            continue
        bad = next((row.observed[n] for n in names if not row.observed[n].ran), None)
        if bad is not None:
            not_run.append(f"# {row.entry.id} ({row.entry.qualname}): {bad.message}")
            continue
        groups: dict[tuple, list[str]] = {}
        for n in names:
            obs = row.observed[n]
            groups.setdefault((obs.policy, obs.message, obs.review), []).append(n)
        tables = []
        for group in groups.values():
            suffix = f"-{group[0]}" if len(groups) > 1 else ""
            table = entry_table(row, group, reference, len(groups) > 1 or set(group) != every,
                                suffix)
            if table is None:  # no single expect fits: one entry per dtype
                table_list = [entry_table(row, [g], reference, True, f"-{g}") for g in group]
                tables.extend(t for t in table_list if t is not None)
            else:
                tables.append(table)
        departs = [n for n in names if not row.observed[n].as_reference]
        if departs:
            lines += review_item(row, device, reference, departs, tables, builtin)
            continue
        if row.entry.reference_defect is not None:  # the contract and the defect, as listed
            tables = [defect_table(row, names)]
        elif row.entry.library is not None:
            tables = [listed_table(row, names)]
        for table in map(_overriding, tables, [builtin] * len(tables)):
            lines += ["", "[[entry]]"] + [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    if not_run:
        lines += ["", f"# Not run on {device} (the call fails there even without autocast, or the",
                  "# op is missing from this torch):", *not_run]
    lines += library_drafts(device, unnamed or {})
    return "\n".join(lines) + "\n"


def render_diff(device: str, reference: str, rows: list[Row], dtypes: list[torch.dtype]) -> str:
    names = [devices.dtype_name(d) for d in dtypes]
    counts = Counter(r.status for r in rows)
    lines = [
        f"## {device} against the {reference} policy (torch {torch.__version__})",
        "",
        f"{len(rows)} entries: {counts.get('same', 0)} same, {counts.get('differs', 0)} differ, "
        f"{counts.get('not run', 0)} not run.",
        "",
        f"| entry | op | {reference} | " + " | ".join(f"{device} {n}" for n in names) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for row in rows:
        if row.status == "same":
            continue
        cells = []
        for n in names:
            obs = row.observed.get(n)
            if obs is None:
                cells.append("—")
            elif obs.ran:
                cells.append(f"{obs.policy} ({', '.join(obs.dtypes) or 'no tensor'})"
                             + (" — values differ from the control" if obs.review else ""))
            else:
                cells.append(f"not run: {obs.message[:80]}")
        lines.append(f"| {row.entry.id} | `{row.entry.qualname}` | {row.reference} | "
                     + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


# -- command -------------------------------------------------------------------------


