"""``python -m amp_conformance run [options] -- <pytest arguments>``: a supervised run whose
exit status is a verdict.

A backend can end the process that checks it: a kernel that segfaults or aborts, one
that calls ``os._exit(0)`` (exit status 0, no summary, no report), one that hangs. None of
that can be seen from inside the dying process, so this command runs the suite in a child
process and judges it from outside, by its conformance report:

- the child gets ``--conformance-report`` (``--report PATH.json``, default
  ``amp-conformance-report/report.json``) and pytest-timeout's per-item ``--timeout``
  (``--item-timeout``, default 600 s) unless the arguments already set them;
- a child that makes no progress (its report journal does not grow) for ``--hang-timeout``
  seconds is killed;
- when the child is gone, a report still marked "running" is rebuilt from its journal,
  marked crashed, naming the item that was running;
- a child that lost its device (exit status 6, :mod:`amp_conformance.plugin.health`) or
  died is followed by a fresh one that runs the items no child has started yet
  (``--amp-resume``), as pytest-xdist replaces a crashed worker, for as long as the
  children make progress: the run gives up only when ``--dead-after`` children in a row
  (default 3) stopped in their first item (under xdist, each worker in its first) with no
  op blamed by the health probe (the device is dead for everything; a loss blamed on an op
  is a faulty kernel, whose callers may come in a row), when ``--time-budget`` seconds are
  spent, or after ``--max-restarts`` restarts if the user
  sets a cap (a kernel that loses the device on every call thus costs one restart per
  item that calls it, never the rest of the run); the report at ``PATH.json`` then merges the children's
  journals (each child's own report is kept as ``PATH.1.json``, ``PATH.2.json``, …): the
  item a child lost its device or died in failed, once, and every other item ran in a
  process whose device was sound;
- the exit status is 0 only when pytest exited 0, the report says the run completed and
  at least one check executed; 1 when a restarted run completed with a failure (the item
  that lost the device or died is one); else pytest's own non-zero status, 6 for a device
  lost when the run gave up restarting, or 3 for a run that crashed, was killed, or said 0 while its
  report was incomplete.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_conformance.plugin.health import DEVICE_LOST
from amp_conformance.plugin.options import positional_paths
from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.banner import (
    blamed_op,
    quarantine_note,
    restart_note,
    run_warning,
)
from amp_conformance.plugin.report.files import report_paths, write_report
from amp_conformance.plugin.report.journal import journal_path, merge, rebuild, replay
from amp_conformance.tools import declarations
from amp_conformance.tools.forked import launch

DEFAULT_REPORT = "amp-conformance-report/report.json"
INCOMPLETE = 3
#: how a child's run may stop that a fresh process can go on from
RESTARTABLE = ("device lost", "crashed")
#: processes in a row that stop in their first item before the device counts as dead
DEAD_AFTER = 3


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not {text!r}")
    return value


@dataclass(frozen=True)
class Limits:
    """When the supervised run stops starting fresh processes, besides running out of items."""

    max_restarts: int | None = None
    dead_after: int = DEAD_AFTER
    time_budget: float | None = None

    def give_up(self, restarts: int, in_a_row: int, elapsed: float, fake: bool = False
                ) -> str | None:
        """Why no fresh process should start after ``restarts`` restarts, the last
        ``in_a_row`` processes having stopped in their first item, ``elapsed`` s in; or None.
        On a fake device no device can die: the processes did."""
        if in_a_row >= self.dead_after and fake:
            return (f"{in_a_row} processes in a row died in their first item on a fake device "
                    "(the processes died, not a device: no device is used), no op blamed")
        if in_a_row >= self.dead_after:
            return (f"the device is dead: {in_a_row} processes in a row lost it (or died) in "
                    "their first item, no op blamed")
        if self.max_restarts is not None and restarts >= self.max_restarts:
            return f"no restart left (--max-restarts {self.max_restarts})"
        if self.time_budget is not None and elapsed >= self.time_budget:
            return f"the time budget ran out (--time-budget {self.time_budget:g} s)"
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", default=DEFAULT_REPORT, metavar="PATH.json",
                        help=f"the conformance report to write (default {DEFAULT_REPORT}); "
                             "ignored when the pytest arguments give --conformance-report")
    parser.add_argument("--item-timeout", type=float, default=600.0, metavar="S",
                        help="pytest-timeout's limit per item, in seconds (default 600)")
    parser.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                        help="kill the run when it makes no progress for this long "
                             "(default: the item timeout plus 120 s)")
    parser.add_argument("--max-restarts", type=int, default=None, metavar="N",
                        help="start at most N fresh processes after one that lost its device "
                             "or died (default: no fixed cap, restart while processes make "
                             "progress; 0: never)")
    parser.add_argument("--dead-after", type=_positive_int, default=DEAD_AFTER, metavar="N",
                        help="stop when N processes in a row lose the device (or die) in their "
                             "first item with no op blamed by the health probe: the device is "
                             f"dead for everything (default {DEAD_AFTER})")
    parser.add_argument("--time-budget", type=float, default=None, metavar="S",
                        help="start no fresh process once the run has taken S seconds "
                             "(default: none)")
    parser.add_argument("--no-quarantine", dest="quarantine", action="store_false",
                        help="try every item, also those that call an op that lost the device "
                             "(default: such an op is quarantined: its callers are reported "
                             "not run, one restart per faulty op)")
    parser.add_argument("--draft-declarations", metavar="DIR", default=None,
                        help="after the run, draft DIR/capabilities.toml (the capabilities "
                             "whose checks failed) and DIR/xfail.txt (every other failure, "
                             "commented out) from its report, for review")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="arguments for pytest, after --, e.g. -- --device cuda")


def _option_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def _without_option(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == name and i + 1 < len(args):
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def child_command(args: argparse.Namespace) -> tuple[list[str], Path]:
    """The pytest command line of the children, less the report each writes (added by
    :func:`attempt_command`), and the run's report."""
    pytest_args = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    if "--pyargs" not in pytest_args and not positional_paths(pytest_args):
        pytest_args = ["--pyargs", "amp_conformance", *pytest_args]  # the shipped suite
    report = _option_value(pytest_args, "--conformance-report") or args.report
    pytest_args = _without_option(pytest_args, "--conformance-report")
    if _option_value(pytest_args, "--timeout") is None:
        pytest_args.append(f"--timeout={args.item_timeout:g}")
    if _distributed(pytest_args) and _option_value(pytest_args, "--max-worker-restart") is None:
        pytest_args.append(f"--max-worker-restart={WORKER_REPLACEMENTS}")
    if not getattr(args, "quarantine", True):
        pytest_args.append("--amp-no-quarantine")  # nor one an xdist controller would keep
    elif _option_value(pytest_args, "--amp-quarantine-file") is None:
        pytest_args.append(f"--amp-quarantine-file={quarantine_path(Path(report))}")
    return [sys.executable, "-m", "pytest", *pytest_args], Path(report)


#: xdist workers a child may replace (``--max-worker-restart``; xdist's default is 4 per
#: worker). Under ``run`` a worker is replaced after a loss the health probe blames on an
#: op, and that op is then quarantined in every process, so each faulty op costs one
#: replacement: ten faulty ops under ``-n 2`` passed xdist's default of 8, and the rest of
#: the child's items waited for a whole new child (its controller and workers). Losses with
#: no op blamed still stop the child, and ``run`` decides what follows.
WORKER_REPLACEMENTS = 100


def _distributed(args: list[str]) -> bool:
    """Whether the pytest arguments ask pytest-xdist for workers (``-n N``, ``-nN``,
    ``--numprocesses``)."""
    return any(a in ("-n", "--numprocesses") or a.startswith("--numprocesses=")
               or (a.startswith("-n") and len(a) > 2 and not a.startswith("--"))
               for a in args)


def quarantine_path(report: Path) -> Path:
    """``reports/cpu.json`` -> ``reports/cpu.quarantine.txt``: the ops that lost the device,
    shared by every process of the run (plugin/quarantine.py)."""
    return report.with_name(f"{report.stem}.quarantine.txt")


def attempt_report(report: Path, number: int) -> Path:
    """``reports/cpu.json`` -> ``reports/cpu.2.json``: the report of the run's n-th child."""
    return report.with_name(f"{report.stem}.{number}{report.suffix}")


def attempt_command(command: list[str], report: Path, resume: Path | None) -> list[str]:
    return [*command, f"--conformance-report={report}",
            *([f"--amp-resume={resume}"] if resume is not None else [])]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def supervise(command: list[str], journal: Path, hang_timeout: float) -> tuple[int, str | None]:
    """Run the child; (its exit status, why it was killed or None)."""
    child = launch(command)
    last_size, last_progress = _size(journal), time.monotonic()
    try:
        while child.poll() is None:
            time.sleep(0.05)  # a child that ends is reaped at once: restarts are frequent
            size = _size(journal)
            if size != last_size:
                last_size, last_progress = size, time.monotonic()
            elif time.monotonic() - last_progress > hang_timeout:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                return child.returncode, f"no progress for {hang_timeout:g} s (hung)"
    except KeyboardInterrupt:
        os.killpg(child.pid, signal.SIGINT)
        child.wait()
    return child.returncode, None


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def settle_report(report: Path, returncode: int, killed: str | None) -> dict[str, Any]:
    """The report as the child left it, or rebuilt from its journal if the child died."""
    data: dict[str, Any] | None = None
    if report.is_file():
        data = json.loads(report.read_text(encoding="utf-8"))
    status = ((data or {}).get("run") or {}).get("status")
    if data is None or status == "running" or killed:
        journal = journal_path(report)
        if not journal.is_file():  # e.g. a usage error: pytest said why
            return {"run": {"status": "not started", "running": None, "executed": 0,
                            "how": _describe_exit(returncode)}}
        data = rebuild(journal)
        data["run"]["how"] = killed or _describe_exit(returncode)
        write_report(report, data)
    return data


def verdict(returncode: int, data: dict[str, Any]) -> tuple[int, str]:
    run = data.get("run") or {}
    status = run.get("status")
    if status == "not started":
        return returncode or INCOMPLETE, ("amp-conformance run: no session started "
                                          f"({_describe_exit(returncode)}); see pytest's message")
    if status == "completed" and run.get("setup_errors"):
        return returncode or 4, f"amp-conformance run: completed, {run_warning(data)}"
    restarted = restart_note(data)
    if status == "completed" and run.get("executed", 0) > 0 and restarted:
        summary = data.get("summary") or {}
        code = 1 if summary.get("failed") or summary.get("error") else returncode
        return code, f"amp-conformance run: completed, exit status {code}: {restarted}"
    if status == "completed" and run.get("executed", 0) > 0:
        return returncode, f"amp-conformance run: completed, pytest {_describe_exit(returncode)}"
    if status == "completed":
        return returncode or 5, "amp-conformance run: " + (run_warning(data) or "no check executed")
    gave_up = f" It gave up restarting: {run['gave_up']}." if run.get("gave_up") else ""
    if status == "device lost":
        return DEVICE_LOST, f"amp-conformance run: {run_warning(data)}{gave_up}"
    where = f" in {run['running']}" if run.get("running") else ""
    how = run.get("how") or run.get("interrupted_by") or _describe_exit(returncode)
    code = returncode if returncode not in (0, None) and status == "interrupted" else INCOMPLETE
    return code, f"amp-conformance run: {status}{where} ({how}); the report is no verdict{gave_up}"


def _files(report: Path) -> list[Path]:
    return [*report_paths(report), journal_path(report)]


def _keep_first(report: Path) -> Path:
    """Move the first child's report and journal to ``PATH.1.*``, out of the merged one's way."""
    first = attempt_report(report, 1)
    for old, new in zip(_files(report), _files(first), strict=True):
        if old.exists():
            old.replace(new)
    return first


def _remove_stale(report: Path) -> None:
    """Remove an earlier run's per-child reports (``PATH.1.json``, ``PATH.2.json``, …)."""
    number = 1
    while any(f.exists() for f in _files(attempt_report(report, number))):
        for f in _files(attempt_report(report, number)):
            f.unlink(missing_ok=True)
        number += 1


def _started(reports: list[Path]) -> tuple[set[str], int]:
    """The node ids the children started, and how many items the first one selected."""
    accs = [replay(journal_path(r)) for r in reports if journal_path(r).is_file()]
    if not accs:
        return set(), 0
    return set().union(*(a.started for a in accs)), accs[0].collected or 0


def _merged(parts: list[tuple[Path, int, dict[str, Any]]], settled: bool) -> dict[str, Any]:
    """The run's report from every child's journal."""
    return merge([(replay(journal_path(path)), data.get("run", {}).get("how")
                   or _describe_exit(code)) for path, code, data in parts], settled)


def _ran(path: Path) -> int:
    """How many items the child that wrote ``path`` started."""
    journal = journal_path(path)
    return len(replay(journal).started) if journal.is_file() else 0


def _no_progress(path: Path, run_: dict[str, Any]) -> bool:
    """Whether a child that stopped tells of a dead device: it ran no item beyond the ones it
    lost the device in (one; under xdist one per worker whose device was lost), and the
    health probe blamed no op for any. A probe that names an op (``… in aten::mm``) tells of
    a faulty kernel, whose callers may well come in a row (a family whose every item calls
    mm): each still runs once; the rest of the run goes on."""
    losses = run_.get("lost") or [{}]
    return (_ran(path) <= max(1, len(losses))
            and all(blamed_op(loss.get("reason")) is None for loss in losses))


def _children(command: list[str], report: Path, hang: float, limits: Limits
              ) -> tuple[list[tuple[Path, int, dict[str, Any]]], bool, str | None]:
    """Run children until one ends its selection, nothing is left, or :class:`Limits` says
    to give up: (path, exit status, report) of each; whether the last stopped (lost its
    device or died) in the last item left, so that every item has an outcome; and why the
    run gave up, if it did."""
    resume = report.with_name(f"{report.stem}.resume.txt")
    parts: list[tuple[Path, int, dict[str, Any]]] = []
    begun, in_a_row, gave_up = time.monotonic(), 0, None
    while True:
        path = attempt_report(report, len(parts) + 1) if parts else report
        journal_path(path).unlink(missing_ok=True)
        returncode, killed = supervise(attempt_command(command, path, resume if parts else None),
                                       journal_path(path), hang)
        parts.append((path, returncode, settle_report(path, returncode, killed)))
        run_ = parts[-1][2].get("run") or {}
        if run_.get("status") not in RESTARTABLE:
            break
        started, selected = _started([p for p, _, _ in parts])
        left = selected - len(started)
        in_a_row = in_a_row + 1 if _no_progress(path, run_) else 0
        gave_up = limits.give_up(len(parts) - 1, in_a_row, time.monotonic() - begun,
                                 bool(parts[-1][2].get("fake")))
        if left > 0 and gave_up:
            break
        if len(parts) == 1:
            parts[0] = (_keep_first(report), *parts[0][1:])
        if left <= 0:
            resume.unlink(missing_ok=True)
            return parts, True, None
        resume.write_text("".join(f"{n}\n" for n in sorted(started)), encoding="utf-8")
        print(f"amp-conformance run: process {len(parts)} stopped ({run_['status']} in "
              f"{run_.get('lost_after') or run_.get('running')}); process {len(parts) + 1} runs "
              f"the {left} items not yet run", flush=True)
    resume.unlink(missing_ok=True)
    return parts, False, gave_up


def run(args: argparse.Namespace) -> int:
    command, report = child_command(args)
    hang = args.hang_timeout if args.hang_timeout is not None else args.item_timeout + 120
    _remove_stale(report)
    report.parent.mkdir(parents=True, exist_ok=True)
    if args.quarantine:
        quarantine_path(report).write_text("", encoding="utf-8")  # this run's, none inherited
    limits = Limits(args.max_restarts, args.dead_after, args.time_budget)
    parts, settled, gave_up = _children(command, report, hang, limits)
    merged = len(parts) > 1 or settled
    data = _merged(parts, settled) if merged else parts[0][2]
    if gave_up:
        data["run"]["gave_up"] = gave_up
    code, line = verdict(parts[-1][1], data)
    held = quarantine_note(data)
    if held:
        line = f"{line.rstrip('.')}; {held}"
    by_cause = causes.summary_line(causes.group(data.get("results") or []))
    if by_cause and (data.get("run") or {}).get("status") == "completed":
        line = f"{line.rstrip('.')}; {by_cause}"  # a stopped run names what stopped it
    limited = causes.limits_line(data)
    if limited:
        line = f"{line.rstrip('.')}; {limited}"
    if merged or gave_up:
        data["run"]["exitstatus"] = code  # the run's, not its last child's
        write_report(report, data)
    print(line, flush=True)
    if args.draft_declarations and (data.get("run") or {}).get("status") == "completed":
        drafted = declarations.write(data, Path(args.draft_declarations))
        print(f"amp-conformance run: drafted {' and '.join(map(str, drafted))}: review them, "
              "then pass --capabilities and --xfail-file", flush=True)
    return code
