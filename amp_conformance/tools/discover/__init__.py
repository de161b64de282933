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
import logging
import sys
from collections import Counter
from pathlib import Path

import torch

from amp_conformance.checks.case import Case
from amp_conformance.core import devices
from amp_conformance.core.dispatch import op_overload, registered_overloads, unresolvable
from amp_conformance.core.resolve import SettingsError, resolve
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.tools.discover.observe import REFERENCE_POLICY, Row, observe
from amp_conformance.tools.discover.write import render_diff, render_list


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
    parser.add_argument("--oplist", action="append", default=[], metavar="PATH.toml",
                        help="a list of the reference device run too, e.g. an operator "
                             "library's (op = \"<library>::<op>\"); repeatable")
    parser.add_argument("--diff", metavar="PATH.md", help="also write the diff (Markdown) here")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")


def discover(device: str, lists: oplist.OpList, target: Target,
             dtypes: list[torch.dtype]) -> list[Row]:
    """Each entry of the reference device's ``lists`` observed on ``device`` under each of
    ``dtypes``."""
    # FakeTensorMode logs every meta kernel that raises; here raising is an observation
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    if not lists.entries:
        raise oplist.OpListError(lists.device, None, None, f"no op list describes {lists.device!r}")
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


def unnamed_libraries(device: str, lists: oplist.OpList) -> dict[str, str]:
    """The device's Autocast kernels of operator libraries no entry of ``lists`` names,
    one per op (``{"lib::op": its schema, or why it cannot be called}``)."""
    named = lists.libraries
    found: dict[str, str] = {}
    for name in registered_overloads(device):
        library, _, rest = name.partition("::")
        op = f"{library}::{rest.partition('.')[0]}"
        if library in ("aten", "prims") or library in named or op in found:
            continue
        why = unresolvable(name)
        found[op] = why if why else str(op_overload(name)._schema)
    return found


def run(args: argparse.Namespace) -> int:
    try:
        resolved = resolve(args.device, args.fake, args.amp_dtype or (), args.backend_module)
        dtypes, supported = list(resolved.amp_dtypes), list(resolved.supported)
        lists = oplist.load_only(args.reference, args.oplist)
        rows = discover(args.device, lists, resolved.target, dtypes)
    except (SettingsError, oplist.OpListError) as exc:
        print(f"amp-conformance discover: {exc}", file=sys.stderr)
        return 2
    imports = tuple(dict.fromkeys(m for path in args.oplist
                                  for m in oplist.parse_file(path).meta.get("imports", [])))
    unnamed = unnamed_libraries(args.device, lists)
    text = render_list(args.device, args.reference, rows, dtypes, args.fake, supported,
                       args.backend_module, tuple(args.oplist), imports, unnamed)
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
          f"{counts.get('not run', 0)} not run"
          + (f"; {_libraries(unnamed)} that no list names, drafted (commented)" if unnamed else "")
          + f"; wrote {out}")
    return 0


def _libraries(unnamed: dict[str, str]) -> str:
    """"6 Autocast kernels of torchvision" (or of several libraries, each counted)."""
    counts = Counter(name.partition("::")[0] for name in unnamed)
    kernels = "kernel" if len(unnamed) == 1 else "kernels"
    return f"{len(unnamed)} Autocast {kernels} of " + ", ".join(
        f"{lib} ({n})" if len(counts) > 1 else lib for lib, n in counts.items())
