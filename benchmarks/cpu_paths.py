"""Which of the project's tests can depend on the CPU's kernels: found, not kept by hand.

    python benchmarks/cpu_paths.py [--write] [--keep FOLDER] [--from FOLDER] [pytest args...]

Runs the project's tests from the checkout (README's command, ``pytest -n 2 -q -p
no:randomly``, unless pytest arguments are given) twice, with this file's plugin in every
process: on the host's CPU path, then forced onto the AVX2 path (``ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2``, oneDNN included), as on this project's AVX2-only machines. So it
needs a host above AVX2 (AVX-512). A test depends on the path where

- its outcome differs between the two runs (passed, failed, skipped or xfailed, a skip's or
  an xfail's reason included), or
- it reads the CPU's capability (``torch.backends.cpu.get_cpu_capability``) while it runs:
  what it compares is chosen by the path (a record kept per capability), so it may pass on
  both today and still go stale on one. Reads that only word the capability (the report's
  account of the machine, a hardware probe's skip reason: :data:`WORDING`) do not count;
  what such a probe decides shows in the outcomes.

The tests of the shipped suite (``amp_conformance/suite``) are not listed: every one of
them calls the CPU's kernels, and ``.ci/run``'s AVX2 pass runs it whole. ``--write`` puts
the others, one node id a line, into ``tests/cpu-paths.txt``, which that pass reads
(``pytest @tests/cpu-paths.txt``). Run it again when a test is added that calls kernels a
path may lack, or that reads a record kept per capability.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

#: the folder each process writes its tests' rows to
FOLDER = "AMP_CPU_PATHS_DIR"
ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "tests" / "cpu-paths.txt"
SUITE = "amp_conformance/suite/"
#: the code that reads the capability to word it, not to choose what a test compares
WORDING = ("amp_conformance/plugin/report/", "amp_conformance/core/hardware.py")
README_COMMAND = ("-n", "2", "-q", "-p", "no:randomly")
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
#: the worst outcome of a test's phases wins
RANK = ("passed", "xpassed", "skipped", "xfailed", "failed")

_running: set[str] = set()
_rows: dict[str, dict] = {}
#: the files that read the capability during the test running now
_readers: set[str] = set()


def pytest_configure() -> None:
    """Count the reads of the CPU's capability (only inside a cpu_paths run)."""
    if not os.environ.get(FOLDER):
        return
    import torch.backends.cpu

    capability = torch.backends.cpu.get_cpu_capability

    def counted() -> str:
        caller = Path(sys._getframe(1).f_code.co_filename)
        _readers.add(caller.relative_to(ROOT).as_posix() if caller.is_relative_to(ROOT)
                     else str(caller))
        return capability()
    torch.backends.cpu.get_cpu_capability = counted


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not os.environ.get(FOLDER):
        return (yield)
    _running.add(item.nodeid)
    _readers.clear()
    try:
        return (yield)
    finally:
        _rows.setdefault(item.nodeid, {"outcome": "passed", "reason": ""})["reads"] = \
            sorted(_readers)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """The outcome of a test this process ran (an xdist controller's copies are not)."""
    if report.nodeid not in _running:
        return
    outcome, reason = report.outcome, ""
    if hasattr(report, "wasxfail"):
        outcome, reason = ("xfailed" if report.skipped else "xpassed"), report.wasxfail
    elif report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2]
    row = _rows.setdefault(report.nodeid, {"outcome": "passed", "reason": ""})
    if RANK.index(outcome) > RANK.index(row["outcome"]):
        row.update(outcome=outcome, reason=reason)


def _plain(reason: str) -> str:
    """A reason without what differs from run to run (temporary paths, addresses) or names
    the path without depending on it (the capability a probe's reason quotes)."""
    reason = re.sub(r"/tmp/\S*", "<tmp>", reason)
    reason = re.sub(r"\b(AVX512|AVX2|DEFAULT|ZVECTOR|VSX|SVE\d*)\b", "<capability>", reason)
    return re.sub(r"0x[0-9a-f]+", "0x?", reason)


def pytest_unconfigure() -> None:
    """This process's rows, into the run's folder (nothing outside a cpu_paths run)."""
    if os.environ.get(FOLDER) and _rows:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(os.environ[FOLDER], f"{name}.json").write_text(json.dumps(_rows))


def run(extra: tuple[str, ...], variables: dict[str, str], folder: Path) -> tuple[str, dict]:
    """One run of the project's tests with ``variables`` set: its last line and its rows."""
    import timeline  # beside this file: the environment of a run with a plugin of it

    folder.mkdir(parents=True, exist_ok=True)
    env = timeline.beside(**{FOLDER: str(folder)}, **variables)
    done = subprocess.run([sys.executable, "-m", "pytest", *extra, "-p", "cpu_paths"], cwd=ROOT,
                          env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = done.stdout.strip().splitlines()
    (folder / "last-line.txt").write_text(lines[-1] if lines else "(no output)")
    return _read(folder)


def _read(folder: Path) -> tuple[str, dict]:
    rows: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        rows.update(json.loads(path.read_text()))
    return (folder / "last-line.txt").read_text(), rows


def depends(host: dict[str, dict], avx2: dict[str, dict]) -> dict[str, str]:
    """Each test that depends on the CPU's path, with why: its outcome on the two runs, or
    its reading the capability (a test run on one side only counts as differing)."""
    found = {}
    for nodeid in sorted(host.keys() | avx2.keys()):
        one, two = host.get(nodeid), avx2.get(nodeid)
        if one is None or two is None:
            found[nodeid] = "ran on one path only"
        elif (one["outcome"], _plain(one["reason"])) != (two["outcome"], _plain(two["reason"])):
            found[nodeid] = f"{_said(one)} on the host's path, {_said(two)} on AVX2"
        elif any(not r.startswith(WORDING) for r in one["reads"] + two["reads"]):
            readers = [r for r in one["reads"] + two["reads"] if not r.startswith(WORDING)]
            found[nodeid] = f"reads the CPU's capability ({', '.join(sorted(set(readers)))})"
    return found


def _said(row: dict) -> str:
    return row["outcome"] + (f" ({row['reason'][:80]})" if row["reason"] else "")


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {LIST.relative_to(ROOT)}")
    parser.add_argument("--keep", type=Path, help="keep both runs' rows in this folder")
    parser.add_argument("--from", dest="source", type=Path,
                        help="read the rows a --keep run left instead of running")
    args, extra = parser.parse_known_args()
    if args.source is None and torch.backends.cpu.get_cpu_capability() in ("AVX2", "DEFAULT"):
        print(f"cpu_paths: this CPU's path is {torch.backends.cpu.get_cpu_capability()}: it needs "
              "a host above AVX2 (AVX-512) to compare the two paths", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        base = args.source or args.keep or Path(scratch)
        if args.source is None:
            runs = [run(tuple(extra) or README_COMMAND, v, base / name)
                    for name, v in (("host", {}), ("avx2", AVX2))]
        else:
            runs = [_read(base / name) for name in ("host", "avx2")]
    (host_line, host), (avx2_line, avx2) = runs
    print(f"host's path: {host_line}\nAVX2 path:   {avx2_line}")
    if not host or not avx2:
        print("cpu_paths: a run left no rows", file=sys.stderr)
        return 1
    found = depends(host, avx2)
    for nodeid, why in found.items():
        print(f"  {nodeid}: {why}")
    listed = [n for n in found if not n.startswith(SUITE)]
    print(f"{len(found)} tests depend on the CPU's path, {len(found) - len(listed)} of them the "
          f"suite's; {len(listed)} of the project's tests")
    if args.write:
        LIST.write_text("".join(f"{n}\n" for n in listed), encoding="utf-8")
        print(f"wrote {LIST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
