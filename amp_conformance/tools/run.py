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
- the exit status is 0 only when pytest exited 0, the report says the run completed and
  at least one check executed; else pytest's own non-zero status, or 3 for a run that
  crashed, was killed, or said 0 while its report was incomplete.
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

from amp_conformance.plugin.report.files import write_report
from amp_conformance.plugin.report.journal import journal_path, rebuild
from amp_conformance.plugin.report.render import run_warning

DEFAULT_REPORT = "amp-conformance-report/report.json"
INCOMPLETE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", default=DEFAULT_REPORT, metavar="PATH.json",
                        help=f"the conformance report to write (default {DEFAULT_REPORT}); "
                             "ignored when the pytest arguments give --conformance-report")
    parser.add_argument("--item-timeout", type=float, default=600.0, metavar="S",
                        help="pytest-timeout's limit per item, in seconds (default 600)")
    parser.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                        help="kill the run when it makes no progress for this long "
                             "(default: the item timeout plus 120 s)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="arguments for pytest, after --, e.g. -- --device cuda")


def _option_value(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def child_command(args: argparse.Namespace) -> tuple[list[str], Path]:
    """The pytest command line of the child, and the report it writes."""
    pytest_args = [a for a in args.pytest_args if a != "--"] if args.pytest_args else []
    if "--pyargs" not in pytest_args and not any(Path(a).exists() for a in pytest_args
                                                 if not a.startswith("-")):
        pytest_args = ["--pyargs", "amp_conformance", *pytest_args]  # the shipped suite
    report = _option_value(pytest_args, "--conformance-report")
    if report is None:
        report = args.report
        pytest_args.append(f"--conformance-report={report}")
    if _option_value(pytest_args, "--timeout") is None:
        pytest_args.append(f"--timeout={args.item_timeout:g}")
    return [sys.executable, "-m", "pytest", *pytest_args], Path(report)


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
    if status == "completed" and run.get("executed", 0) > 0:
        return returncode, f"amp-conformance run: completed, pytest {_describe_exit(returncode)}"
    if status == "completed":
        return returncode or 5, "amp-conformance run: " + (run_warning(data) or "no check executed")
    where = f" in {run['running']}" if run.get("running") else ""
    how = run.get("how") or run.get("interrupted_by") or _describe_exit(returncode)
    code = returncode if returncode not in (0, None) and status == "interrupted" else INCOMPLETE
    return code, f"amp-conformance run: {status}{where} ({how}); the report is no verdict"


def run(args: argparse.Namespace) -> int:
    command, report = child_command(args)
    journal = journal_path(report)
    journal.unlink(missing_ok=True)
    hang = args.hang_timeout if args.hang_timeout is not None else args.item_timeout + 120
    returncode, killed = supervise(command, journal, hang)
    data = settle_report(report, returncode, killed)
    code, line = verdict(returncode, data)
    print(line, flush=True)
    return code
