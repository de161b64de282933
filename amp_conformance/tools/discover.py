"""``python -m amp_conformance discover --device DEV --out DEV.toml``: what a device's
autocast does to each op of a reference device's lists, written as an op list of its own.

A vendor starts from what its device *does*, and sees where that departs from the
reference policy (CUDA's by default). For every entry of the reference lists (the same
op, arguments and namespace) and every autocast dtype, the op is called on the device:

* inside autocast and outside it, on the entry's own inputs and on two variants of them
  — every eligible tensor (floating, not float64, on the device) in float32, and every
  eligible tensor in the autocast dtype;
* the observed policy is ``lower`` (float32 inputs come out in the autocast dtype),
  ``fp32`` (autocast-dtype inputs come out in float32), ``promote`` (mixed inputs come out
  in the widest type, where the call outside autocast does not), ``unchanged`` (autocast
  changes no output dtype) or ``error`` (the call raises inside autocast only; an op that
  raises outside autocast too is not run on the device and is listed as such).

The op list written (valid for the loader, ``[list] device = DEV``) keeps each reference
entry's id and arguments with the category of the observed policy, so
``pytest --device DEV --oplist DEV.toml`` passes on the device it was discovered on; it
is a first draft to review, not a specification. The diff against the reference is
printed (and written with ``--diff PATH.md``). Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
import tomllib
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import expected_inside
from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast, output_dtypes, tensors_in, widest_eligible
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, describe_error, first_line
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target, fake_supported
from amp_conformance.schema import argspec, oplist
from amp_conformance.schema.categories import CATEGORIES
from amp_conformance.schema.oplist import Entry

#: the reference's policies in discover's vocabulary
REFERENCE_POLICY = {
    "lower": "lower", "fp32": "fp32", "fp32_opt_dtype": "fp32", "promote": "promote",
    "builtin_promote": "unchanged", "banned": "error",
}
#: observed policy -> the op-list policy its category carries
LIST_POLICY = {"lower": "lower", "fp32": "fp32", "promote": "promote", "unchanged": "builtin_promote",
               "error": "banned", "other": "builtin_promote"}


@dataclass(frozen=True)
class Observation:
    """What autocast did to one entry for one autocast dtype."""

    policy: str  # lower, fp32, promote, unchanged, error, other, not run
    dtypes: tuple[str, ...] = ()  # output dtypes inside autocast on the entry's inputs
    message: str = ""
    #: whether the outputs (or the error) are what the reference entry expects
    as_reference: bool = False
    #: output dtypes of the same call outside autocast (None where it raised)
    outside: tuple[str, ...] | None = None
    #: what discover could not confirm, for a human to look at
    review: str = ""

    @property
    def ran(self) -> bool:
        return self.policy != "not run"


@dataclass
class Row:
    entry: Entry
    reference: str
    observed: dict[str, Observation] = field(default_factory=dict)

    @property
    def status(self) -> str:
        policies = {o.policy for o in self.observed.values()}
        if "not run" in policies:
            return "not run"
        if all((o.as_reference or o.policy == self.reference) and not o.review
               for o in self.observed.values()):
            return "same"
        return "differs"


# -- observing -----------------------------------------------------------------------


def _call(target: Target, fn: Any, args: tuple, kwargs: dict, amp_dtype: torch.dtype | None) -> Any:
    """The output of one call (inside autocast when amp_dtype is given), or the error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if amp_dtype is None:
                return fn(*args, **kwargs)
            with target.autocast(amp_dtype):
                return fn(*args, **kwargs)
    except Exception as exc:  # an op may raise anything; the error is what is observed
        return exc


def _dtypes(result: Any) -> Any:
    """The output dtypes of a call as a tuple (the error itself where it raised)."""
    return result if isinstance(result, Exception) else tuple(output_dtypes(result))


def _names(dtypes: tuple) -> tuple[str, ...]:
    return tuple(devices.dtype_name(d) for d in dtypes)


_CONTROL_CAST = {"lower": "amp", "fp32": "float32", "promote": "widest"}


def _values_differ(target: Target, fn: Any, args: tuple, kwargs: dict, policy: str,
                   amp_dtype: torch.dtype, inside: Any, outside: Any) -> bool:
    """Whether the autocast output differs (bitwise) from its control: autocast off, the
    eligible inputs cast by hand to the policy's dtype (or untouched, for unchanged)."""
    if not target.has_values:
        return False
    dev = target.device
    if policy == "unchanged":
        control = outside
    elif policy in _CONTROL_CAST:
        cast = {"amp": amp_dtype, "float32": torch.float32,
                "widest": widest_eligible((args, kwargs), dev)}[_CONTROL_CAST[policy]]
        control = _call(target, fn, hand_cast(args, cast, dev), hand_cast(kwargs, cast, dev), None)
    else:
        return False
    if isinstance(control, Exception):
        return False
    try:
        compare(inside, control, "bitwise", None, "discover")
    except (ConformanceFailure, AssertionError, RuntimeError):
        return True
    return False


def observe(entry: Entry, target: Target, amp_dtype: torch.dtype) -> Observation:
    """Run ``entry`` on ``target`` and classify what autocast did."""
    found = oplist.variants(entry)
    if not found:
        return Observation("not run", message=f"no callable {entry.qualname} in this torch")
    _, fn = found[0]
    dev = target.device
    case = Case(target, amp_dtype, entry)
    with unchanged_autocast_state(dev, f"discovering {entry.qualname}"), target.tensors():
        try:
            args, kwargs = case.build_inputs()
        except Exception as exc:  # inputs the device cannot hold
            return Observation("not run", message=f"inputs: {describe_error(exc)}")
        inside = _call(target, fn, args, kwargs, amp_dtype)
        outside = _call(target, fn, args, kwargs, None)
        if isinstance(inside, Exception):
            if isinstance(outside, Exception):
                return Observation("not run", message=f"raises outside autocast too: "
                                                      f"{describe_error(outside)}")
            return Observation("error", message=first_line(inside, 200),
                               as_reference=entry.policy == "banned",
                               outside=_names(_dtypes(outside)))
        expected = expected_inside(case, args, kwargs)
        variants = {}
        for name, dtype in (("float32", torch.float32), ("amp", amp_dtype)):
            a, k = hand_cast(args, dtype, dev), hand_cast(kwargs, dtype, dev)
            variants[name] = (_dtypes(_call(target, fn, a, k, amp_dtype)),
                              _dtypes(_call(target, fn, a, k, None)))
        widest = widest_eligible((args, kwargs), dev)
        mixed = len({t.dtype for t in tensors_in((args, kwargs))
                     if t.is_floating_point() and t.dtype != torch.float64
                     and t.device.type == dev}) > 1
        policy = classify(_dtypes(inside), _dtypes(outside), variants, amp_dtype, widest, mixed)
        differ = _values_differ(target, fn, args, kwargs, policy, amp_dtype, inside, outside)
    return Observation(
        policy, _names(_dtypes(inside)), as_reference=matches(expected, _dtypes(inside)),
        outside=None if isinstance(outside, Exception) else _names(_dtypes(outside)),
        review=("values differ from the control with autocast off: autocast reaches only part "
                "of this op (e.g. kernels of its decomposition)") if differ else "",
    )


def classify(inside: tuple, outside: Any, variants: dict, amp_dtype: torch.dtype,
             widest: torch.dtype | None, mixed: bool) -> str:
    """The policy name for what was seen (see the module docstring)."""
    f32_in, f32_out = variants["float32"]
    amp_in, amp_out = variants["amp"]
    # each policy is "inside autocast, the call behaves as outside autocast on inputs cast
    # to X": that holds for complex and integer outputs too (fft, matrix_rank, polar)
    if _ok(f32_in) and f32_in != f32_out and (
            f32_in == amp_out or (f32_in[:1] == (amp_dtype,) and f32_out[:1] != (amp_dtype,))):
        return "lower"
    if _ok(amp_in) and amp_in != amp_out and (
            amp_in == f32_out or (amp_in[:1] == (torch.float32,) and amp_out[:1] != (torch.float32,))):
        return "fp32"
    if mixed and inside[:1] == (widest,) and outside != inside:
        return "promote"
    changed = any(_ok(i) and i != o for i, o in ((inside, outside), (f32_in, f32_out), (amp_in, amp_out)))
    return "other" if changed else "unchanged"


def matches(expected: Any, got: tuple) -> bool:
    """Whether output dtypes ``got`` are what the reference expects (as the policy check)."""
    if isinstance(expected, tuple):
        head = expected[:-1] if expected and expected[-1] is ... else expected
        return tuple(got[:len(head)]) == head and (head is not expected or len(got) == len(head))
    if expected is None:
        return not got
    return bool(got) and all(d == expected for d in got)


def _ok(result: Any) -> bool:
    return isinstance(result, tuple) and bool(result)


# -- writing -------------------------------------------------------------------------


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
    if namespace is not None or "namespace" in raw:
        table["namespace"] = namespace or row.entry.namespace
    default = {"lower": "amp", "fp32": "float32"}.get(obs.policy)
    if obs.policy in ("unchanged", "other") or (default and expect != default) or \
            (obs.policy == "promote" and isinstance(expect, list)):
        table["expect"] = expect
    if obs.policy == "error":
        table["expect"] = "error"
        table["error"] = obs.message
    if "expect_outside" in raw:  # the reference's, re-derived from what was seen here
        table["expect_outside"] = outside
    if restrict:
        table["amp_dtypes"] = list(group)
    note = f"observed {obs.policy}; {reference}: {row.reference}"
    if obs.policy == "other":
        note += "; review: a dtype change discover cannot name"
    if obs.review:
        note += f"; review: {obs.review}"
    table["note"] = note
    order = ["id", "op", "category", "namespace", "method", "args", "kwargs", "expect",
             "expect_outside", "error"]
    return {k: table[k] for k in [*order, *sorted(set(table) - set(order))] if k in table}


def render_list(device: str, reference: str, rows: list[Row], dtypes: list[torch.dtype],
                fake: bool, supported: list[torch.dtype] | None = None) -> str:
    """The discovered op list (TOML). Entries seen under some of the dtypes the device
    supports only are restricted to those (``amp_dtypes``)."""
    every = {devices.dtype_name(d) for d in (supported or dtypes)}
    lines = [
        f"# Autocast policy of {device}, discovered by `python -m amp_conformance discover "
        f"--device {device}{' --fake' if fake else ''} --reference {reference}`",
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
        for table in tables:
            lines += ["", "[[entry]]"] + [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    if not_run:
        lines += ["", f"# Not run on {device} (the call fails there even without autocast, or the",
                  "# op is missing from this torch):", *not_run]
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", required=True, metavar="TYPE",
                        help="device type whose autocast is observed")
    parser.add_argument("--out", required=True, metavar="PATH.toml",
                        help="op-list file to write (for --oplist)")
    parser.add_argument("--reference", default="cuda", metavar="TYPE",
                        help="device whose op lists are run and compared with (default: cuda)")
    parser.add_argument("--fake", action="store_true",
                        help="observe the device's policy through FakeTensorMode (no hardware)")
    parser.add_argument("--amp-dtype", action="append", default=None, metavar="DTYPE",
                        help="autocast dtype to observe; repeatable; default: all the device supports")
    parser.add_argument("--backend-module", action="append", default=[], metavar="MODULE",
                        help="module imported first to register a backend; repeatable")
    parser.add_argument("--diff", metavar="PATH.md", help="also write the diff (Markdown) here")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")


def discover(device: str, reference: str, target: Target,
             dtypes: list[torch.dtype]) -> list[Row]:
    # FakeTensorMode logs every meta kernel that raises; here raising is an observation
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    lists = oplist.load(reference)
    if not lists.entries:
        raise oplist.OpListError(reference, None, None, f"no op list describes {reference!r}")
    rows = []
    for entry in lists.entries:
        if entry.version_gap() is not None:
            continue
        row = Row(entry, REFERENCE_POLICY[entry.policy])
        for dtype in dtypes:
            name = devices.dtype_name(dtype)
            if Case(target, dtype, entry).skip_reason("policy"):
                continue  # amp_dtypes, or a skip the entry records for this dtype
            row.observed[name] = observe(entry, target, dtype)
        if row.observed:
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    try:
        for module in args.backend_module:
            importlib.import_module(module)
        devices.validate(args.device)
        if args.fake and not fake_supported(args.device):
            raise devices.DeviceError(
                f"--fake needs Autocast kernels for {args.device!r} registered in this torch")
        if not args.fake and not devices.is_available(args.device):
            raise devices.DeviceError(f"device {args.device!r} is not available here; add --fake "
                                      "to observe its registered policy without it")
        supported = devices.supported_amp_dtypes(args.device, args.fake)
        dtypes = ([devices.parse_dtype(n) for n in args.amp_dtype] if args.amp_dtype else supported)
        refused = [d for d in dtypes if d not in supported]
        if refused:
            raise devices.DeviceError(f"{args.device} autocast does not support "
                                      f"{', '.join(map(str, refused))}")
        rows = discover(args.device, args.reference, Target(args.device, args.fake), dtypes)
    except (devices.DeviceError, oplist.OpListError, ImportError) as exc:
        print(f"amp-conformance discover: {exc}", file=sys.stderr)
        return 2
    text = render_list(args.device, args.reference, rows, dtypes, args.fake, supported)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    oplist.parse_file(out)  # what was written must load
    diff = render_diff(args.device, args.reference, rows, dtypes)
    if args.diff:
        Path(args.diff).write_text(diff, encoding="utf-8")
    counts = Counter(r.status for r in rows)
    if not args.quiet:
        print(diff)
    print(f"discover: {len(rows)} entries of the {args.reference} lists on {args.device}: "
          f"{counts.get('same', 0)} same, {counts.get('differs', 0)} differ, "
          f"{counts.get('not run', 0)} not run; wrote {out}")
    return 0
