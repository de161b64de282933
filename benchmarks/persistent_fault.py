"""What a kernel that loses the device on every call costs a supervised run.

    python benchmarks/persistent_fault.py [--kind kernel|mode] [--ops baddbmm] [--ops mm,bmm,...]
                                          [-- pytest args]

Runs ``python -m amp_conformance run`` with default options from an empty directory against
the fault backend (``tests/faults/amp_fault.py``, ``AMP_FAULT=persistent``), for each
registration kind of its faulty kernels (``--kind``, default both: ``kernel``, a per-op
Autocast kernel registered from Python; ``mode``, a backend running its ops through a Python
dispatch mode): first on a sound device (the backend loaded as that kind, no op faulty),
then once per ``--ops`` set (default: one faulty op, then five). Prints per run: wall time,
processes, exit status and the merged report's counts, as a Markdown table. Each op that
loses the device costs one restart (a child forked from ``run``, which has imported torch:
its collection, not torch's import); the items that call it afterwards are quarantined
(reported not run, never retried), however the kernel is registered.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FAULTS = Path(__file__).resolve().parent.parent / "tests" / "faults"
ONE = "baddbmm"
FIVE = "baddbmm,addbmm,addmm,bmm,mm"
KINDS = ("kernel", "mode")


def run(kind: str, ops: str | None, extra: list[str]) -> dict:
    """One supervised run; ``ops`` None: the sound device."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(FAULTS), os.environ.get("PYTHONPATH")])))
    env.update(AMP_FAULT="persistent", AMP_FAULT_KIND=kind, AMP_FAULT_OPS=ops or "")
    with tempfile.TemporaryDirectory() as empty:
        cmd = [sys.executable, "-m", "amp_conformance", "run", "--report=r.json", "--",
               "--device", "cpu", "--backend-module", "amp_fault", "-p", "amp_fault_health",
               "-p", "no:cacheprovider", "-q", *extra]
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=empty, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        data = json.loads((Path(empty) / "r.json").read_text())
    s, r = data["summary"], data["run"]
    return {"kind": kind,
            "ops": "none (sound device)" if ops is None else f"{len(ops.split(','))}: {ops}",
            "wall": wall, "exit": proc.returncode, "processes": r.get("processes", 1),
            "passed": s["passed"], "failed": s["failed"], "skipped": s["skipped"],
            "xfailed": s["xfailed"], "not_run": r.get("not_run", 0),
            "quarantined": s.get("quarantined", 0),
            "status": r["status"], "last": proc.stdout.strip().splitlines()[-1][:600]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", choices=KINDS, default=None,
                        help="how the faulty kernels are registered (default: each)")
    parser.add_argument("--ops", action="append", default=None, metavar="OP[,OP…]",
                        help=f"faulty ops of one run (default: {ONE}, then {FIVE})")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    rows = [run(kind, ops, extra) for kind in (args.kind or KINDS)
            for ops in [None, *(args.ops or [ONE, FIVE])]]
    print("| kind | faulty ops | wall | processes | exit | passed | failed | skipped | xfailed | "
          "quarantined | not run |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['kind']} | {row['ops']} | {row['wall']:.0f} s | {row['processes']} | {row['exit']} | "
              f"{row['passed']} | {row['failed']} | {row['skipped']} | {row['xfailed']} | "
              f"{row['quarantined']} | {row['not_run']} |")
    for row in rows:
        print(f"{row['kind']}, {row['ops']}: {row['last']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
