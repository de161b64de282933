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
  (``--amp-resume``), as pytest-xdist replaces a crashed worker, at most
  ``--max-restarts`` times; the report at ``PATH.json`` then merges the children's
  journals (each child's own report is kept as ``PATH.1.json``, ``PATH.2.json``, …): the
  item a child lost its device or died in failed, once, and every other item ran in a
  process whose device was sound;
- the exit status is 0 only when pytest exited 0, the report says the run completed and
  at least one check executed; 1 when a restarted run completed with a failure (the item
  that lost the device or died is one); else pytest's own non-zero status, 6 for a device
  lost with no restart left, or 3 for a run that crashed, was killed, or said 0 while its
  report was incomplete.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from amp_conformance.plugin.health import DEVICE_LOST
from amp_conformance.plugin.report.banner import restart_note, run_warning
from amp_conformance.plugin.report.files import report_paths, write_report
from amp_conformance.plugin.report.journal import journal_path, merge, rebuild, replay

DEFAULT_REPORT = "amp-conformance-report/report.json"
INCOMPLETE = 3
#: how a child's run may stop that a fresh process can go on from
RESTARTABLE = ("device lost", "crashed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", default=DEFAULT_REPORT, metavar="PATH.json",
                        help=f"the conformance report to write (default {DEFAULT_REPORT}); "
                             "ignored when the pytest arguments give --conformance-report")
    parser.add_argument("--item-timeout", type=float, default=600.0, metavar="S",
                        help="pytest-timeout's limit per item, in seconds (default 600)")
    parser.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                        help="kill the run when it makes no progress for this long "
                             "(default: the item timeout plus 120 s)")
    parser.add_argument("--max-restarts", type=int, default=4, metavar="N",
                        help="start at most N fresh processes after one that lost its device "
                             "or died, each running the items not yet started (default 4; 0: "
                             "never)")
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
    if "--pyargs" not in pytest_args and not any(Path(a).exists() for a in pytest_args
                                                 if not a.startswith("-")):
        pytest_args = ["--pyargs", "amp_conformance", *pytest_args]  # the shipped suite
    report = _option_value(pytest_args, "--conformance-report") or args.report
    pytest_args = _without_option(pytest_args, "--conformance-report")
    if _option_value(pytest_args, "--timeout") is None:
        pytest_args.append(f"--timeout={args.item_timeout:g}")
    return [sys.executable, "-m", "pytest", *pytest_args], Path(report)


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
    child = subprocess.Popen(command, start_new_session=True)
    last_size, last_progress = _size(journal), time.monotonic()
    try:
        while child.poll() is None:
            time.sleep(0.5)
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
    restarted = restart_note(data)
    if status == "completed" and run.get("executed", 0) > 0 and restarted:
        summary = data.get("summary") or {}
        code = 1 if summary.get("failed") or summary.get("error") else returncode
        return code, f"amp-conformance run: completed, exit status {code}: {restarted}"
    if status == "completed" and run.get("executed", 0) > 0:
        return returncode, f"amp-conformance run: completed, pytest {_describe_exit(returncode)}"
    if status == "completed":
        return returncode or 5, "amp-conformance run: " + (run_warning(data) or "no check executed")
    if status == "device lost":
        return DEVICE_LOST, f"amp-conformance run: {run_warning(data)}"
    where = f" in {run['running']}" if run.get("running") else ""
    how = run.get("how") or run.get("interrupted_by") or _describe_exit(returncode)
    code = returncode if returncode not in (0, None) and status == "interrupted" else INCOMPLETE
    return code, f"amp-conformance run: {status}{where} ({how}); the report is no verdict"


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


def _children(command: list[str], report: Path, hang: float, max_restarts: int
              ) -> tuple[list[tuple[Path, int, dict[str, Any]]], bool]:
    """Run children until one ends its selection, nothing is left, or the restarts are
    spent: (path, exit status, report) of each, and whether the last stopped (lost its
    device or died) in the last item left, so that every item has an outcome."""
    resume = report.with_name(f"{report.stem}.resume.txt")
    parts: list[tuple[Path, int, dict[str, Any]]] = []
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
        if left > 0 and len(parts) > max_restarts:
            break
        if len(parts) == 1:
            parts[0] = (_keep_first(report), *parts[0][1:])
        if left <= 0:
            resume.unlink(missing_ok=True)
            return parts, True
        resume.write_text("".join(f"{n}\n" for n in sorted(started)), encoding="utf-8")
        print(f"amp-conformance run: process {len(parts)} stopped ({run_['status']} in "
              f"{run_.get('lost_after') or run_.get('running')}); process {len(parts) + 1} runs "
              f"the {left} items not yet run", flush=True)
    resume.unlink(missing_ok=True)
    return parts, False


def run(args: argparse.Namespace) -> int:
    command, report = child_command(args)
    hang = args.hang_timeout if args.hang_timeout is not None else args.item_timeout + 120
    _remove_stale(report)
    parts, settled = _children(command, report, hang, args.max_restarts)
    merged = len(parts) > 1 or settled
    data = _merged(parts, settled) if merged else parts[0][2]
    code, line = verdict(parts[-1][1], data)
    if merged:
        data["run"]["exitstatus"] = code  # the run's, not its last child's
        write_report(report, data)
    print(line, flush=True)
    return code
