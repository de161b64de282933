"""Where a run's time goes around its items, process by process.

    python benchmarks/timeline.py [-n N] [--device cpu] [pytest args...]

Runs ``pytest --pyargs amp_conformance.suite`` from an empty folder (suite_speed.py's run),
with this file's plugin in every process of the run: the main one (under ``-n``, the xdist
controller) and each worker. Each process notes, in seconds from the command's start:
- when it had loaded its plugins (``pytest_configure``);
- when its collection ended (an xdist controller collects nothing);
- its first and last item;
- its end.

It also notes its CPU time and its items. One row per process is printed, then the wall
time. What a ``-n`` run pays before its first item, beside a serial run, is there to read:
the controller's start, then the workers' own, then their collection.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

#: the folder each process writes its marks to, and the command's start (time.time())
FOLDER, START = "AMP_TIMELINE_DIR", "AMP_TIMELINE_START"
MARKS = ("plugins", "collected", "first item", "last item", "end")


_marks: dict[str, float] = {}
_items = [0]


def pytest_configure() -> None:
    _marks["plugins"] = time.time()


def pytest_collection_finish() -> None:
    _marks["collected"] = time.time()


def pytest_runtest_logstart() -> None:
    _marks.setdefault("first item", time.time())


def pytest_runtest_logfinish() -> None:
    _marks["last item"] = time.time()
    _items[0] += 1


def pytest_unconfigure() -> None:
    """This process's row, into the run's folder (nothing outside a timeline run)."""
    if not os.environ.get(FOLDER):
        return
    _marks["end"] = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(os.environ[FOLDER], f"{name}.json").write_text(json.dumps({
        "process": name, "items": _items[0], "cpu": usage.ru_utime + usage.ru_stime,
        "marks": {k: v - float(os.environ[START]) for k, v in _marks.items()}}))


def table(rows: list[dict], wall: float) -> str:
    """The processes' marks: the main process (the xdist controller under ``-n``) first,
    then the workers by name."""
    rows = sorted(rows, key=lambda r: (r["process"] != "main", r["process"]))
    lines = [f"{'process':<12}" + "".join(f"{m:>12}" for m in MARKS) + f"{'CPU s':>8}{'items':>7}"]
    for row in rows:
        marks = "".join(f"{row['marks'][m]:>12.2f}" if m in row["marks"] else f"{'-':>12}"
                        for m in MARKS)
        lines.append(f"{row['process']:<12}{marks}{row['cpu']:>8.2f}{row['items']:>7}")
    lines.append(f"wall {wall:.2f} s (seconds from the command's start)")
    return "\n".join(lines)


def beside(**variables: str) -> dict[str, str]:
    """This environment for a run with a plugin of this folder (``-p NAME``): the folder first
    on PYTHONPATH, no variable of an xdist run this one may be inside of, and ``variables``."""
    here = str(Path(__file__).resolve().parent)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    return {**inherited, **variables,
            "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}


def main() -> int:
    import suite_speed  # beside this file: its run of the suite, from an empty folder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", dest="workers", type=int, default=None,
                        help="xdist workers (default: a serial run)")
    args, extra = parser.parse_known_args()
    with tempfile.TemporaryDirectory() as marks:
        env = beside(**{FOLDER: marks, START: repr(time.time())})
        _, wall, last, *_ = suite_speed.run([*extra, "-p", "timeline"], args.workers, env)
        rows = [json.loads(p.read_text()) for p in Path(marks).glob("*.json")]
    print(last)
    if not rows:
        print("timeline: no process left its marks", file=sys.stderr)
        return 1
    print(table(rows, wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
