"""Time the conformance suite: items, wall time and items per second, serial and -n 2.

    python benchmarks/suite_speed.py [--repeat N] [--bytecode-cache] [--device cpu] [pytest args...]

Runs ``pytest --pyargs amp_conformance.suite`` in a subprocess (so torch's import is
counted, as a user would see it) from an empty directory, and prints the ratio of the
``-n 2`` wall time to the serial one. Every process pays pytest's assertion rewriting of
the packages that ship a pytest plugin (Hypothesis among them, about 1 s here) unless
Python may cache bytecode: where ``PYTHONDONTWRITEBYTECODE`` is set, as on this project's
machine, the run says so; ``--bytecode-cache`` lifts it for the runs (after one run that
fills the cache), as a user's environment usually is.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)")


def run(extra: list[str], workers: int | None, env: dict[str, str]) -> tuple[int, float, str]:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance.suite", "-q",
           "-p", "no:cacheprovider", *extra]
    if workers:
        cmd += ["-n", str(workers)]
    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=empty, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    items = sum(int(n) for n, _ in SUMMARY.findall(last))
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {proc.returncode}: {last}\n{proc.stderr[-2000:]}")
    return items, wall, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (best is shown)")
    parser.add_argument("--bytecode-cache", action="store_true",
                        help="let Python cache bytecode (unset PYTHONDONTWRITEBYTECODE)")
    args, extra = parser.parse_known_args()
    env = dict(os.environ)
    if args.bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        run(extra, None, env)  # fills the cache
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} cores "
          f"({torch.backends.cpu.get_cpu_capability()}), bytecode cache "
          f"{'off (PYTHONDONTWRITEBYTECODE)' if env.get('PYTHONDONTWRITEBYTECODE') else 'on'}")
    print(f"{'mode':<10} {'items':>6} {'wall s':>8} {'items/s':>8}  summary")
    walls = []
    for label, workers in (("serial", None), ("-n 2", 2)):
        best = min((run(extra, workers, env) for _ in range(args.repeat)), key=lambda r: r[1])
        items, wall, last = best
        walls.append(wall)
        print(f"{label:<10} {items:>6} {wall:>8.2f} {items / wall:>8.1f}  {last}")
    print(f"-n 2 / serial wall: {walls[1] / walls[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
