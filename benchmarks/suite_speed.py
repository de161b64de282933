"""Time the conformance suite: items, wall time and items per second, serial and -n 2.

    python benchmarks/suite_speed.py [--device cpu] [extra pytest args...]

Runs ``pytest --pyargs amp_conformance.suite`` in a subprocess (so torch's import is
counted, as a user would see it) from an empty directory.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)")


def run(extra: list[str], workers: int | None) -> tuple[int, float, str]:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance.suite", "-q",
           "-p", "no:cacheprovider", *extra]
    if workers:
        cmd += ["-n", str(workers)]
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=empty, capture_output=True, text=True)
        wall = time.perf_counter() - start
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    items = sum(int(n) for n, _ in SUMMARY.findall(last))
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {proc.returncode}: {last}\n{proc.stderr[-2000:]}")
    return items, wall, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (best is shown)")
    args, extra = parser.parse_known_args()
    print(f"{'mode':<10} {'items':>6} {'wall s':>8} {'items/s':>8}  summary")
    for label, workers in (("serial", None), ("-n 2", 2)):
        best = min((run(extra, workers) for _ in range(args.repeat)), key=lambda r: r[1])
        items, wall, last = best
        print(f"{label:<10} {items:>6} {wall:>8.2f} {items / wall:>8.1f}  {last}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
