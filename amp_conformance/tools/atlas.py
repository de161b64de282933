"""``python -m amp_conformance atlas``: what autocast does to every op of op_db, per device.

For each OpInfo of the running release and each device (the real one where it is here,
else its policy through FakeTensorMode; cpu is always real), the first float32 sample is
run under the device's default autocast dtype and judged by the OpInfo tier
(:mod:`amp_conformance.checks.opinfo.judge`): **alone** (no autocast kernel entered),
the policy of the overload it enters (**lower**, **fp32**, **promote**, …) or, for a
composite, ``via`` the policies of the overloads its decomposition reaches, with the
output dtypes; an error says so. ``docs/atlas.md`` is this page for the release docs/operator-surface.md
names (``tests/test_atlas.py`` regenerates a slice of it); the nightly matrix keeps one per
release, and ``--diff OLD.json NEW.json`` lists the ops whose cells changed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from amp_conformance.checks.opinfo import check, judge, source
from amp_conformance.checks.reference import policy_table
from amp_conformance.core import devices
from amp_conformance.core.backend import BackendError, import_backend
from amp_conformance.core.target import Target, fake_supported
from amp_conformance.tools import atlas_page, forked


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--devices", default=",".join(devices.atlas_devices()),
                        help="comma-separated device types (default: %(default)s)")
    parser.add_argument("--backend-module", action="append", default=[], metavar="MODULE",
                        help="import a backend first (its device can then be named); repeatable")
    parser.add_argument("--oplist", action="append", default=[], metavar="PATH",
                        help="an extra op list of the devices (the policy the atlas names); repeatable")
    parser.add_argument("--ops", default=None, help="comma-separated OpInfo ids (default: all)")
    parser.add_argument("--out", default=None, metavar="PATH.md", help="write the page here")
    parser.add_argument("--json", default=None, metavar="PATH.json", help="write the cells as JSON")
    parser.add_argument("--cells", default=None, help=argparse.SUPPRESS)  # build()'s child
    parser.add_argument("--diff", nargs=2, default=None, metavar=("OLD.json", "NEW.json"),
                        help="list the ops whose cells differ between two atlases, and exit")
    parser.add_argument("--html", default=None, metavar="PAGE.html",
                        help="write a page of the atlas (or of the --from atlases): op x "
                             "device x release, coloured by policy, with a differs view")
    parser.add_argument("--from", dest="sources", nargs="+", default=None, metavar="ATLAS.json",
                        help="with --html: the page of these atlases (e.g. one per torch "
                             "release and a vendor's real device), none computed")


def target_of(device: str) -> Target:
    """The real device where it is here (cpu always), else its policy faked."""
    if devices.is_available(device):  # cpu always is
        return Target(device)
    if not fake_supported(device):
        raise SystemExit(f"atlas: {device} is not here and this torch registers no Autocast "
                         "kernels for it to fake")
    return Target(device, fake=True)


def cell(ref: source.OpRef, target: Target, oplists: tuple[str, ...] = ()) -> str:
    """What autocast does to the op's first float32 sample on ``target``, in a few words."""
    amp = devices.default_amp_dtype(target.device)
    case = check.OpinfoCase(target, amp, ref, samples=1, oplists=oplists)
    try:
        verdict = next(iter(check.verdicts_of(case, first_only=True)[0]), None)
    except check.NotApplicable:
        return "—"
    if verdict is None or verdict.outcome == judge.NOT_APPLICABLE:
        return "—"
    if verdict.detail.startswith("banned"):
        return "banned: raises its error"
    if verdict.outcome in (judge.CAPABILITY, judge.DEFECT, judge.FAILED):
        word = {judge.DEFECT: f"error ({verdict.defect})", judge.FAILED: "departs"}.get(
            verdict.outcome, "error")
        return f"{word}: {verdict.detail.rpartition('raises ')[2][:70]}"
    dtypes = "/".join(dict.fromkeys(verdict.dtypes)) or "no tensor"
    if verdict.kind == judge.ALONE:
        return f"alone → {dtypes}"
    rules = policy_table(target, amp, oplists).rules
    policies = "+".join(dict.fromkeys(rules[n].policy if n in rules else "unlisted"
                                      for n in verdict.entered))
    if verdict.kind == judge.POLICY:
        return f"{policies} → {dtypes}"
    names = ", ".join(n.partition("::")[2] for n in verdict.entered[:3])
    return f"via {policies} ({names}) → {dtypes}"


def build(device_types: list[str], ops: list[str] | None = None,
          oplists: tuple[str, ...] = (), backend_modules: tuple[str, ...] = (),
          isolated: bool = True) -> dict[str, Any]:
    """The atlas; ``isolated``: each device's cells in a child process (the command), else
    here (a test that trusts the backend)."""
    refs = [r for r in source.refs() if ops is None or r.id in ops]
    targets = {d: target_of(d) for d in device_types}
    by_device = {d: (_cells_isolated(d, [r.id for r in refs], oplists, backend_modules)
                     if isolated else {r.id: cell(r, t, oplists) for r in refs})
                 for d, t in targets.items()}
    return {"torch": torch.__version__,
            "devices": {d: {"fake": t.fake, "amp_dtype": devices.dtype_name(
                devices.default_amp_dtype(d))} for d, t in targets.items()},
            "ops": {r.id: {d: by_device[d][r.id] for d in targets} for r in refs}}


def _cells_isolated(device: str, ops: list[str], oplists: tuple[str, ...],
                    backend_modules: tuple[str, ...]) -> dict[str, str]:
    """One device's cells, computed in a child process that journals each cell (one
    device's observers and reference kernels at a time): a backend that kills the process
    in one op (PyTorch/XLA's ``roll`` of an empty tensor: SIGFPE) costs that cell, which
    says so, and a fresh child goes on with the next op."""
    cells: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "cells.jsonl"
        while len(cells) < len(ops):
            left = [op for op in ops if op not in cells]
            returncode = _child(device, left, oplists, backend_modules, journal)
            running = None
            for line in journal.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if "cell" in event:
                    cells[event["op"]], running = event["cell"], None
                else:
                    running = event["op"]
            if running is None and len(cells) < len(ops):
                running = next(op for op in ops if op not in cells)
            if running is not None:
                cells[running] = f"crashed the process ({_how(returncode)})"
    return cells


def _child(device: str, ops: list[str], oplists: tuple[str, ...],
           backend_modules: tuple[str, ...], journal: Path) -> int:
    """The exit status of a child that journals ``ops``' cells of ``device``: forked from
    this process (which has imported op_db and the backends) where the device is the CPU or
    faked, else a fresh interpreter (a real accelerator is not used across a fork)."""
    if forked.can_fork() and (device == "cpu" or target_of(device).fake):
        def main() -> int:
            with open(os.devnull, "w") as quiet:
                os.dup2(quiet.fileno(), 1)
            journal_cells(device, ops, oplists, journal)
            return 0
        return forked.Forked([], main=main).wait()
    return subprocess.run(
        [sys.executable, "-m", "amp_conformance", "atlas", "--devices", device,
         "--ops", ",".join(ops), "--cells", str(journal),
         *[f"--backend-module={m}" for m in backend_modules],
         *[f"--oplist={p}" for p in oplists]], stdout=subprocess.DEVNULL).returncode


def _how(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def journal_cells(device: str, ops: list[str], oplists: tuple[str, ...], path: Path) -> None:
    """The child's side: each cell of ``device``, journalled before and after it is made."""
    refs = {r.id: r for r in source.refs()}
    target = target_of(device)
    with path.open("a", encoding="utf-8") as out:
        for op in ops:
            out.write(json.dumps({"op": op}) + "\n")
            out.flush()
            out.write(json.dumps({"op": op, "cell": cell(refs[op], target, oplists)}) + "\n")
            out.flush()


def markdown(atlas: dict[str, Any]) -> str:
    heads = [f"{d} ({m['amp_dtype']}{', fake' if m['fake'] else ''})"
             for d, m in atlas["devices"].items()]
    command = atlas.get("command", "python -m amp_conformance atlas --out docs/atlas.md "
                                   "--json docs/data/atlas.json")
    lines = [f"# The autocast atlas: torch {atlas['torch']}", "",
             f"Generated by `{command}`; how to read it: docs/operator-surface.md.", "",
             "| op | " + " | ".join(heads) + " |", "| --- " * (len(heads) + 1) + "|"]
    for op, cells in atlas["ops"].items():
        lines.append(f"| `{op}` | " + " | ".join(c.replace("|", "\\|") for c in cells.values()) + " |")
    return "\n".join(lines) + "\n"


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per op and device whose cell changed (ops added or removed included)."""
    lines = []
    for op in sorted(set(old["ops"]) | set(new["ops"])):
        a, b = old["ops"].get(op, {}), new["ops"].get(op, {})
        for d in sorted(set(a) | set(b)):
            if a.get(d) != b.get(d):
                lines.append(f"{op} [{d}]: {a.get(d, 'absent')}  ->  {b.get(d, 'absent')}")
    return lines


def command_of(args: argparse.Namespace) -> str:
    """The command that makes this atlas, for its page's header."""
    words = ["python -m amp_conformance atlas", f"--devices {args.devices}"]
    words += [f"--backend-module {m}" for m in args.backend_module]
    words += [f"--oplist {p}" for p in args.oplist]
    words += [f"--{k} {v}" for k, v in (("ops", args.ops), ("out", args.out), ("json", args.json))
              if v]
    return " ".join(words)


def _page(args: argparse.Namespace, atlases: list[dict[str, Any]], sources: list[str]) -> None:
    start = time.perf_counter()
    size = atlas_page.write(atlases, args.html, sources)
    columns = len(atlas_page.columns(atlases))
    ops = len({op for a in atlases for op in a["ops"]})
    print(f"atlas: wrote {args.html}: {ops} ops x {columns} columns, {size / 1024:.0f} KiB, "
          f"in {time.perf_counter() - start:.2f} s", file=sys.stderr)


def _read_atlas(path: str, option: str) -> dict[str, Any]:
    """An atlas JSON given to ``option``; else an exit naming the option and the file."""
    try:
        atlas = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"atlas: {option} {path}: cannot be read as an atlas JSON: "
                         f"{exc}") from None
    if not (isinstance(atlas, dict) and {"torch", "devices", "ops"} <= set(atlas)):
        raise SystemExit(f"atlas: {option} {path}: not an atlas JSON (expected the keys "
                         "torch, devices and ops that atlas --json writes)")
    return atlas


def run(args: argparse.Namespace) -> int:
    if args.sources is not None:
        if not args.html:
            raise SystemExit("atlas: --from makes a page: give --html PAGE.html")
        _page(args, [_read_atlas(p, "--from") for p in args.sources], list(args.sources))
        return 0
    if args.diff:
        old, new = (_read_atlas(p, "--diff") for p in args.diff)
        changed = diff(old, new)
        print(f"atlas drift torch {old['torch']} -> {new['torch']}: {len(changed)} cells changed")
        print("\n".join(changed))
        return 0
    try:
        for module in args.backend_module:
            import_backend(module)
        source.op_db()
    except (BackendError, source.OpDbUnavailable) as exc:
        print(f"atlas: {exc}", file=sys.stderr)
        return 2
    device_types = [d.strip() for d in args.devices.split(",") if d.strip()]
    ops = args.ops.split(",") if args.ops else None
    if args.cells:  # a child of build(): one device's cells into the journal
        journal_cells(device_types[0], ops or [r.id for r in source.refs()],
                      tuple(args.oplist), Path(args.cells))
        return 0
    atlas = build(device_types, ops, tuple(args.oplist), tuple(args.backend_module))
    if args.devices != ",".join(devices.atlas_devices()) or args.backend_module or args.oplist:
        atlas["command"] = command_of(args)  # a page of another atlas than docs/atlas.md
    page = markdown(atlas)
    for path in (args.out, args.json):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    if args.out:
        Path(args.out).write_text(page, encoding="utf-8")
    if args.json:
        Path(args.json).write_text(json.dumps(atlas, indent=1) + "\n", encoding="utf-8")
    if args.html:
        _page(args, [atlas], [atlas.get("command") or command_of(args)])
    if not args.out and not args.json and not args.html:
        print(page, end="")
    print(f"atlas: {len(atlas['ops'])} ops on {', '.join(atlas['devices'])}", file=sys.stderr)
    return 0
