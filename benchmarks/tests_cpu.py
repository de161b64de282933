"""Where the project's test run spends its CPU, test by test, its child processes included.

    python benchmarks/tests_cpu.py [--top N] [pytest args...]

Runs the project's tests from the checkout (README's command, ``pytest -n 2 -q -p
no:randomly``, unless pytest arguments are given) with this file's plugin in every process.
Around each test it reads the CPU time (user and system) of the process that runs it, of
the children that process waited for, and of the zygotes of ``tests/children.py`` (which
fork the tests' children and their xdist workers, and wait for them): the difference is
the test's CPU, whichever process spent it. A zygote started during a test counts there
from its start. README's command keeps both cores busy to its end, so its wall time is
about the CPU of its tests over two: this shows which tests that CPU is. It prints the
wall time, the tests' CPU against the whole run's, then the test files and the tests
that spent the most.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

#: the folder each process writes its tests' rows to
FOLDER = "AMP_TESTS_CPU_DIR"
ROOT = Path(__file__).resolve().parent.parent
README_COMMAND = ("-n", "2", "-q", "-p", "no:randomly")


def _own() -> float:
    """CPU seconds of this process and of the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def _process(pid: int) -> float:
    """CPU seconds of process ``pid`` and of the children it waited for (0: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / os.sysconf("SC_CLK_TCK")


def _zygotes() -> list[int]:
    children = sys.modules.get("tests.children")
    zygote = getattr(children, "_zygote", None)
    return [p.pid for p in zygote.processes] if zygote is not None else []


def _cpu() -> float:
    return _own() + sum(_process(pid) for pid in _zygotes())


_rows: list[list] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if not os.environ.get(FOLDER):
        return (yield)
    cpu, wall = _cpu(), time.perf_counter()
    try:
        return (yield)
    finally:
        _rows.append([item.nodeid, time.perf_counter() - wall, _cpu() - cpu])


def pytest_unconfigure() -> None:
    """This process's rows, into the run's folder (nothing outside a tests_cpu run)."""
    if os.environ.get(FOLDER) and _rows:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(os.environ[FOLDER], f"{name}.json").write_text(json.dumps(_rows))


def summary(rows: list[list], top: int) -> str:
    """The test files, then the tests, that spent the most CPU (``rows``: node id, wall
    seconds, CPU seconds)."""
    files: Counter[str] = Counter()
    walls: Counter[str] = Counter()
    for nodeid, wall, cpu in rows:
        name = nodeid.split("::")[0]
        files[name] += cpu
        walls[name] += wall
    lines = [f"{'CPU s':>8}{'wall s':>8}  test file"]
    lines += [f"{cpu:>8.1f}{walls[name]:>8.1f}  {name}" for name, cpu in files.most_common(top)]
    lines.append(f"{'CPU s':>8}{'wall s':>8}  test")
    lines += [f"{cpu:>8.1f}{wall:>8.1f}  {nodeid}"
              for nodeid, wall, cpu in sorted(rows, key=lambda r: -r[2])[:top]]
    return "\n".join(lines)


def main() -> int:
    import timeline  # beside this file: the environment of a run with a plugin of it

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25, help="files and tests shown (25)")
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as rows_folder:
        env = timeline.beside(**{FOLDER: rows_folder})
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", *(extra or README_COMMAND),
                               "-p", "tests_cpu"], cwd=ROOT, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = [row for p in Path(rows_folder).glob("*.json") for row in json.loads(p.read_text())]
    run_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)")
    if not rows:
        print("tests_cpu: no test left its row", file=sys.stderr)
        return 1
    print(f"wall {wall:.1f} s; CPU {run_cpu:.1f} s in all, {sum(r[2] for r in rows):.1f} s "
          f"within its {len(rows)} tests")
    print(summary(rows, args.top))
    return 0 if done.returncode == 0 else done.returncode


if __name__ == "__main__":
    sys.exit(main())
