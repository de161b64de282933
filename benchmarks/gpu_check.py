"""Check the suite on a machine with a GPU (or another accelerator): one command.

    python benchmarks/gpu_check.py [--device cuda] [--out DIR] [--only RUN,...] [--overlap]
                                   [--dry-run]

Runs, each from an empty temporary directory against the installed package (the project's
tests from this checkout), with a conformance report where the run is the suite:

- ``coverage``: ``python -m amp_conformance coverage --device DEV``. First: it calls every
  op-list entry once on the device, so the timed runs after it measure the suite rather than
  the machine's first use of torch (its libraries read from disk, the kernels torch
  compiles at run time written to its kernel cache), as on any machine that ran torch before
- ``serial``: ``pytest --pyargs amp_conformance --device DEV``
- ``xdist``: the same with ``-n auto``
- ``aot_eager``, ``inductor``: the same with ``-n auto --amp-compile BACKEND``
- ``opinfo``: the operator-surface tier, ``-n auto --amp-opinfo -k test_opinfo`` (needs
  expecttest, as PyTorch's op_db does)
- ``project``: ``pytest -n auto tests`` in the checkout

and writes a Markdown summary (per run: command, pytest's summary counts, wall time, exit
status, the first line of each failure, read from the JSON reports where there are some;
where each suite run's time went: its tiers and slowest check families) to
``DIR/summary.md`` (default ``gpu-check/``, rewritten after each run, so a check cut off
keeps what it finished) and stdout; reports and logs go beside it.
``--overlap`` starts ``project`` beside the untimed runs after the timed ones (the compile
tiers, opinfo) rather than after them, so the check fits a short lease of the device; the runs
whose times are the targets (``serial``, ``xdist``) still run alone, and the summary says
which ran beside which.
``--publish gpu-check/summary.md`` keeps a check's summary as ``docs/data/gpu-check.md`` and
shows it in ``docs/gpu.md`` (a project test holds the page to the kept file).
Without the device it says so and exits 2: it never writes a summary where nothing ran.
Exit status: 0 when every run exited 0, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from suite_speed import SUMMARY

CHECKOUT = Path(__file__).resolve().parent.parent
#: the page that shows the last check, its generated section's markers, and the summary kept
DOC = CHECKOUT / "docs" / "gpu.md"
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
KEPT = CHECKOUT / "docs" / "data" / "gpu-check.md"
RUNS = ("coverage", "serial", "xdist", "aot_eager", "inductor", "opinfo", "project")
#: failures listed per run in the summary (the rest are counted)
MAX_FAILURES = 25
#: the runs whose wall times are the check's targets: never run beside another
TIMED = ("serial", "xdist")
#: the run ``--overlap`` starts beside the untimed runs
OVERLAPPED = "project"
#: check families listed per run in the summary's time table, slowest first
MAX_FAMILIES = 8


@dataclass(frozen=True)
class Run:
    """One command of the check: where it runs and which report it leaves."""

    name: str
    argv: tuple[str, ...]
    in_checkout: bool = False  # else: a fresh empty temporary directory
    report: Path | None = None  # --conformance-report (JSON) or --junitxml (XML)

    @property
    def command(self) -> str:
        argv = ("python", *self.argv[1:]) if self.argv[0] == sys.executable else self.argv
        return shlex.join(argv)


@dataclass
class Outcome:
    """What one run gave."""

    run: Run
    exit_status: int | None  # None: timed out
    wall: float
    summary: str  # pytest's summary line (coverage: its last line)
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    note: str = ""
    #: the report's tiers and check families, with their items and own time (suite runs)
    tiers: dict[str, dict] = field(default_factory=dict)
    families: dict[str, dict] = field(default_factory=dict)
    #: the run that ran alongside this one (``--overlap``), or ""
    beside: str = ""


def plan(device: str, out: Path, only: tuple[str, ...] = RUNS, workers: str = "auto",
         checkout: Path = CHECKOUT) -> list[Run]:
    """The runs to make, in order (``only``: their names)."""
    unknown = sorted(set(only) - set(RUNS))
    if unknown:
        raise ValueError(f"unknown run {', '.join(unknown)}; runs: {', '.join(RUNS)}")
    py = sys.executable
    suite = (py, "-m", "pytest", "--pyargs", "amp_conformance", "--device", device, "-q",
             "-p", "no:cacheprovider")
    runs = {
        "serial": (*suite,),
        "xdist": (*suite, "-n", workers),
        "aot_eager": (*suite, "-n", workers, "--amp-compile", "aot_eager"),
        "inductor": (*suite, "-n", workers, "--amp-compile", "inductor"),
        "opinfo": (*suite, "-n", workers, "--amp-opinfo", "-k", "test_opinfo"),
    }
    planned = []
    for name in (n for n in RUNS if n in only):
        if name in runs:
            report = out / f"{name}.json"
            planned.append(Run(name, (*runs[name], "--conformance-report", str(report)),
                               report=report))
        elif name == "coverage":
            planned.append(Run(name, (py, "-m", "amp_conformance", "coverage", "--device",
                                      device, "-q")))
        else:
            report = out / "project.xml"
            planned.append(Run(name, (py, "-m", "pytest", "-n", workers, "-q", "tests",
                                      "--junitxml", str(report)),
                               in_checkout=True, report=report))
    return planned


def missing_device(device: str) -> str | None:
    """Why the check cannot run here (the device is absent), or None."""
    import torch

    from amp_conformance.core.devices import availability

    here = availability(device)
    if here.present:
        return None
    return (f"gpu_check: device {device!r} is not available here ({here.how}; torch "
            f"{torch.__version__}): nothing was run, no summary written")


def summary_counts(text: str) -> tuple[str, dict[str, int]]:
    """pytest's summary line (the last line naming counts) and its counts."""
    lines = [line.strip("= ") for line in text.strip().splitlines() if SUMMARY.search(line)]
    if not lines:
        return "", {}
    counts: dict[str, int] = {}
    for n, word in SUMMARY.findall(lines[-1]):
        counts["error" if word.startswith("error") else word] = int(n)
    return lines[-1], counts


def first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def failures_from_report(data: dict) -> list[str]:
    """``node id: first line`` of every failed, erroring or unfinished item of a JSON
    conformance report (``docs/report-schema.md``)."""
    return [f"{r['nodeid']}: {first_line(r.get('message'))}" for r in data.get("results", ())
            if r.get("outcome") in ("failed", "error", "xpassed", "unfinished")]


def failures_from_junit(path: Path) -> list[str]:
    """``node id: first line`` of every failure or error of a JUnit XML file."""
    found = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for problem in (*case.findall("failure"), *case.findall("error")):
            module = case.get("classname", "").replace(".", "/")
            found.append(f"{module}.py::{case.get('name')}: "
                         f"{first_line(problem.get('message') or problem.text)}")
    return found


def failures_from_output(stdout: str) -> list[str]:
    """The short test summary's ``FAILED``/``ERROR`` lines, where no report was left."""
    return [line.split(" ", 1)[1].replace(" - ", ": ", 1) for line in stdout.splitlines()
            if line.startswith(("FAILED ", "ERROR "))]


def coverage_failures(stdout: str) -> list[str]:
    """The overloads the coverage report names as reached but not checked or uncovered."""
    found, section = [], None
    for line in stdout.splitlines():
        header = re.match(r"(reached but not checked|uncovered|listed but not in policy) \(", line)
        if header:
            section = header[1]
        elif not line.startswith("  "):
            section = None
        elif section:
            found.append(f"{section}: {line.strip()}")
    return found


def read_outcome(run: Run, exit_status: int | None, wall: float, stdout: str) -> Outcome:
    """What ``run`` gave, from its report where it left one, else from its output."""
    if run.name == "coverage":
        last = stdout.strip().splitlines()[-1] if stdout.strip() else ""
        return Outcome(run, exit_status, wall, last, failures=coverage_failures(stdout))
    line, counts = summary_counts(stdout)
    outcome = Outcome(run, exit_status, wall, line, counts)
    if run.report is not None and run.report.suffix == ".json" and run.report.exists():
        data = json.loads(run.report.read_text())
        outcome.failures = failures_from_report(data)
        outcome.tiers, outcome.families = data.get("tiers") or {}, data.get("families") or {}
        status = data.get("run", {}).get("status")
        if status != "completed":
            outcome.note = f"report status {status!r}: no verdict"
    elif run.report is not None and run.report.suffix == ".xml" and run.report.exists():
        outcome.failures = failures_from_junit(run.report)
    else:
        outcome.failures = failures_from_output(stdout)
        if run.report is not None:
            outcome.note = "no report was written"
    return outcome


@dataclass
class Started:
    """A run under way: its process, where its output goes, when it began."""

    run: Run
    proc: subprocess.Popen
    stdout: Path
    stderr: Path
    began: float
    empty: tempfile.TemporaryDirectory


def start(run: Run, out: Path) -> Started:
    """Start ``run`` (from an empty temporary directory unless it runs in the checkout),
    its output to files, in a process group of its own (a timeout ends all of it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    empty = tempfile.TemporaryDirectory(prefix="gpu-check-")
    cwd = CHECKOUT if run.in_checkout else Path(empty.name)
    stdout, stderr = out / f"{run.name}.stdout", out / f"{run.name}.stderr"
    with stdout.open("w") as o, stderr.open("w") as e, interruptible():
        proc = subprocess.Popen(run.argv, cwd=cwd, env=env, stdout=o, stderr=e,
                                start_new_session=True)
    return Started(run, proc, stdout, stderr, time.perf_counter(), empty)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Children started inside hear Ctrl-C (:func:`stop` sends it), though this process
    ignores it: an ignored signal stays ignored across exec, and a shell without job
    control starts its background commands ignoring SIGINT and SIGQUIT. A handled one is
    reset to the default there, so for the start it is handled (Python's own handler)."""
    ignored = [s for s in (signal.SIGINT, signal.SIGQUIT) if signal.getsignal(s) == signal.SIG_IGN]
    if threading.current_thread() is not threading.main_thread():
        ignored = []  # only the main thread may set a handler
    for each in ignored:
        signal.signal(each, signal.default_int_handler)
    try:
        yield
    finally:
        for each in ignored:
            signal.signal(each, signal.SIG_IGN)


#: seconds a run stopped by its timeout has to write its summary and reports
GRACE = 30.0


def stop(proc: subprocess.Popen) -> str:
    """End a run past its timeout as Ctrl-C would (pytest then prints its short summary,
    naming every failure so far, and writes its reports), and all of it when that does not
    end it within :data:`GRACE` seconds; then say what it was doing (empty: Ctrl-C ended it)."""
    proc.send_signal(signal.SIGINT)
    stuck = ""
    try:
        proc.wait(timeout=GRACE)
    except subprocess.TimeoutExpired:
        stuck = (f"Ctrl-C did not end it within {GRACE:.0f} s, so it was killed "
                 f"({process_state(proc.pid)}); ")
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return stuck


#: the lines of /proc/PID/status that say why a process does not answer a signal
STATE_FIELDS = ("State", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def process_state(pid: int) -> str:
    """The kernel's account of a process (Linux), for a run that did not end: its state,
    threads and signal masks, and where it waits."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
        wchan = Path(f"/proc/{pid}/wchan").read_text(encoding="utf-8").strip()
    except OSError as exc:
        return f"its state cannot be read: {exc}"
    fields = [line.replace("\t", " ") for line in status if line.split(":")[0] in STATE_FIELDS]
    return "; ".join([*fields, f"waits in {wchan or '-'}"])


def finish(started: Started, out: Path, timeout: float, beside: str = "") -> Outcome:
    """Wait for a started run (at most ``timeout`` seconds from its start), write its log
    (``out/<name>.log``) and read what it gave. ``beside``: the run that ran alongside."""
    run, stuck = started.run, ""
    try:
        status: int | None = started.proc.wait(
            timeout=max(0.0, timeout - (time.perf_counter() - started.began)))
    except subprocess.TimeoutExpired:
        status = None
        stuck = stop(started.proc)
    wall = time.perf_counter() - started.began
    started.empty.cleanup()
    stdout, stderr = started.stdout.read_text(), started.stderr.read_text()
    started.stdout.unlink()
    started.stderr.unlink()
    (out / f"{run.name}.log").write_text(f"$ {run.command}\n{stdout}\n--- stderr ---\n{stderr}")
    outcome = read_outcome(run, status, wall, stdout)
    outcome.beside = beside
    if status is None:
        outcome.note = f"timed out after {timeout:.0f} s; {stuck}" + outcome.note
    elif not outcome.summary:
        outcome.note += f" stderr: {first_line(stderr[-2000:])}"
    return outcome


def execute(run: Run, out: Path, timeout: float) -> Outcome:
    """Make ``run`` (stdout and stderr to ``out/<name>.log``) and read what it gave."""
    return finish(start(run, out), out, timeout)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(device: str, machine: str, outcomes: list[Outcome]) -> str:
    """The Markdown summary of the check."""
    lines = [f"# GPU check: {device} ({machine})", "",
             "| run | command | pytest summary | wall | exit |", "| --- | --- | --- | --- | --- |"]
    for o in outcomes:
        counts = ", ".join(f"{n} {w}" for w, n in o.counts.items()) or o.summary or "-"
        exit_status = "timed out" if o.exit_status is None else str(o.exit_status)
        beside = f" (beside {o.beside})" if o.beside else ""
        lines.append(f"| {o.run.name} | `{_cell(o.run.command)}` | {_cell(counts)} | "
                     f"{o.wall:.1f} s{beside} | {exit_status} |")
    timed = [o for o in outcomes if o.families]
    if timed:
        lines += ["", "## Where the time went", "",
                  "The items' own time (setup, call and teardown; summed over workers in the "
                  "parallel runs) per tier and, slowest first, per check family, from each "
                  "run's report:", "",
                  "| run | tiers | slowest families |", "| --- | --- | --- |"]
        for o in timed:
            tiers = ", ".join(f"{n} {r['items']} items {r['seconds']:.1f} s"
                              for n, r in o.tiers.items() if r.get("items"))
            slow = sorted(o.families.items(), key=lambda kv: -kv[1].get("seconds", 0.0))
            fams = ", ".join(f"{n} {r['seconds']:.1f} s ({r['items']})"
                             for n, r in slow[:MAX_FAMILIES])
            lines.append(f"| {o.run.name} | {_cell(tiers)} | {_cell(fams)} |")
    for o in outcomes:
        if not (o.failures or o.note):
            continue
        lines += ["", f"## {o.run.name}: {len(o.failures)} failure(s)"]
        if o.note.strip():
            lines.append(f"({o.note.strip()})")
        lines += [f"- `{_cell(f)}`" for f in o.failures[:MAX_FAILURES]]
        if len(o.failures) > MAX_FAILURES:
            lines.append(f"- … and {len(o.failures) - MAX_FAILURES} more (see {o.run.name}.log)")
    return "\n".join(lines) + "\n"


def describe_machine(device: str) -> str:
    import torch

    name = device
    try:
        name = getattr(torch, device).get_device_name(0)
    except Exception:  # noqa: BLE001 - the name is only a label
        pass
    return f"{name}, torch {torch.__version__}, Python {sys.version.split()[0]}"


def as_section(summary: str) -> str:
    """A check's summary as docs/gpu.md shows it: its headings two levels down."""
    return "".join(f"##{line}" if line.startswith("#") else line
                   for line in summary.splitlines(keepends=True))


def publish(summary: Path, doc: Path = DOC, kept: Path = KEPT) -> None:
    """Keep a check's summary (``kept``) and show it in ``doc``'s generated section."""
    from amp_conformance.core import generated

    text = summary.read_text(encoding="utf-8")
    kept.write_text(text, encoding="utf-8")
    generated.write(doc, BEGIN, END, as_section(text).rstrip("\n"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="device type to check (default: cuda)")
    parser.add_argument("--out", type=Path, default=Path("gpu-check"),
                        help="folder of the summary, reports and logs (default: gpu-check)")
    parser.add_argument("--only", default=",".join(RUNS),
                        help=f"comma-separated runs to make (default: all: {','.join(RUNS)})")
    parser.add_argument("--workers", default="auto", help="-n of the parallel runs (default auto)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--overlap", action="store_true",
                        help=f"run {OVERLAPPED!r} beside the untimed runs that follow the timed "
                             f"ones (the compile tiers, opinfo) instead of after them; the timed ones "
                             f"({', '.join(TIMED)}) still run alone")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--publish", type=Path, metavar="SUMMARY",
                        help="run nothing: keep SUMMARY (a check's summary.md) as "
                             "docs/data/gpu-check.md and show it in docs/gpu.md")
    args = parser.parse_args(argv)
    if args.publish is not None:
        publish(args.publish)
        print(f"{KEPT.relative_to(CHECKOUT)} and {DOC.relative_to(CHECKOUT)} show {args.publish}")
        return 0
    out = args.out.resolve()
    try:
        runs = plan(args.device, out, tuple(filter(None, args.only.split(","))), args.workers)
    except ValueError as exc:
        parser.error(str(exc))
    if args.dry_run:
        for run in runs:
            print(f"[{run.name}] ({'checkout' if run.in_checkout else 'empty dir'}) {run.command}")
        return 0
    why = missing_device(args.device)
    if why:
        print(why, file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    machine = describe_machine(args.device)
    outcomes: list[Outcome] = []
    aside = next((r for r in runs if r.name == OVERLAPPED), None) if args.overlap else None
    started: Started | None = None

    def record(outcome: Outcome) -> None:
        outcomes.append(outcome)
        print(f"[{outcome.run.name}] exit {outcome.exit_status}, {outcome.wall:.1f} s: "
              f"{outcome.summary}", flush=True)
        (out / "summary.md").write_text(render(args.device, machine, outcomes))

    last_timed = max((i for i, r in enumerate(runs) if r.name in TIMED), default=-1)
    for i, run in enumerate(runs):
        if run is aside:
            continue
        if aside is not None and started is None and i > last_timed:
            print(f"[{aside.name}] {aside.command} (beside the runs that follow)", flush=True)
            started = start(aside, out)
        print(f"[{run.name}] {run.command}", flush=True)
        outcome = execute(run, out, args.timeout)
        outcome.beside = aside.name if started is not None else ""
        record(outcome)
    if aside is not None:
        if started is None:  # nothing untimed to overlap with
            started = start(aside, out)
        others = ", ".join(o.run.name for o in outcomes if o.beside)
        record(finish(started, out, args.timeout, beside=others))
    print(render(args.device, machine, outcomes))
    return 0 if all(o.exit_status == 0 for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
