"""Time the conformance suite: items, wall time and items per second, serial and -n 2.

    python benchmarks/suite_speed.py [--repeat N] [--bytecode-cache] [--device cpu] [pytest args...]
    python benchmarks/suite_speed.py --repeat 3 --device cpu --record docs/data/suite-speed.json
    python benchmarks/suite_speed.py --repeat 3 --device cpu --against HEAD

Runs ``pytest --pyargs amp_conformance.suite`` in a subprocess (so torch's import is
counted, as a user would see it) from an empty directory, serial and ``-n 2`` in turn
``--repeat`` times, and prints the best of each and the ratio of the ``-n 2`` wall time to
the serial one. Every process pays pytest's assertion rewriting of
the packages that ship a pytest plugin (Hypothesis, pytest-xdist, this suite: about 1 s
here) unless their rewritten bytecode is cached, which pytest does where Python may write
bytecode. ``--record PATH`` also puts what it printed, with the machine (CPU model,
capability, cores, torch), the commit and the date, into a JSON record file (replacing the
record of the same arguments): docs/performance.md's table is generated from
docs/data/suite-speed.json (``amp_conformance.tools.figures``).

The first line says what the runs met: ``PYTHONDONTWRITEBYTECODE`` (set on this project's
machine and in many CI images) and how many rewritten files were cached.
``--cold`` removes those files before every run: a fresh virtualenv under
``PYTHONDONTWRITEBYTECODE``, as CI meets it. ``--bytecode-cache`` lifts
``PYTHONDONTWRITEBYTECODE`` for the runs, after one run that fills the cache.

``--against REV`` times the suite of git revision ``REV`` too (its ``amp_conformance`` and
``oplists``, put first on ``PYTHONPATH``), each run of it next to the same run of the working
tree, and prints the ratio of the best runs and of each pair, in wall and in CPU time: a
before and after taken in the same minutes of the same machine. A difference is shown only
where every pair agrees on its direction; ``--against HEAD`` from a clean tree shows how far
apart this machine's pairs fall with no change at all. Nothing is recorded with it.

A figure is recorded only from a quiet machine: during every run the other processes took
less than ``QUIET`` of its cores (the CPU time ``/proc/stat`` counts, less the runs' own),
and the runs of each mode agree within ``AGREE``. Otherwise the last lines say why, nothing
is recorded and the exit status is 3.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)")
#: the most of the machine's cores other processes may take during a run that is recorded
QUIET = 0.10
#: how far apart (relative) the two best runs of a mode may be in a recorded figure
AGREE = 0.10


def busy_seconds() -> float | None:
    """CPU seconds every process has spent on this machine since boot (None off Linux)."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds this process's finished children (the runs) have spent."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rewritten() -> list[Path]:
    """pytest's cached rewritten bytecode of the packages it rewrites in every run (those of
    the distributions that ship a pytest plugin)."""
    roots = set()
    for dist in importlib.metadata.distributions():
        if any(ep.group == "pytest11" for ep in dist.entry_points):
            for name in ep_packages(dist):
                roots.add(Path(dist.locate_file(name)))
    import amp_conformance

    roots.add(Path(amp_conformance.__file__).parent)  # an editable install lists no files
    return [f for root in roots if root.is_dir() for f in root.rglob("*-pytest-*.pyc")]


def ep_packages(dist: importlib.metadata.Distribution) -> set[str]:
    return {str(f).split("/")[0] for f in dist.files or [] if "/" in str(f)
            and not str(f).split("/")[0].endswith((".dist-info", ".data"))}


ROOT = Path(__file__).resolve().parents[1]


def revision_tree(rev: str, folder: Path) -> str:
    """The suite of git revision ``rev`` (its package and op lists) in ``folder``; its
    short hash."""
    short = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", rev],
                           capture_output=True, text=True)
    if short.returncode:
        raise SystemExit(f"suite_speed: --against {rev}: {short.stderr.strip()}")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev,
                              "amp_conformance", "oplists"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return short.stdout.strip()


def run(extra: list[str], workers: int | None, env: dict[str, str],
        cold: bool = False) -> tuple[int, float, str, float | None, float]:
    """(items, wall seconds, pytest's last line, the share of the cores other processes
    took meanwhile, the CPU seconds the run took)."""
    if cold:
        for cached in rewritten():
            cached.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance.suite", "-q",
           "-p", "no:cacheprovider", *extra]
    if workers:
        cmd += ["-n", str(workers)]
    with tempfile.TemporaryDirectory() as empty:
        busy, own, start = busy_seconds(), own_seconds(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=empty, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        after = busy_seconds()
    others = (None if busy is None or after is None else
              max(0.0, (after - busy) - (own_seconds() - own)) / (wall * (os.cpu_count() or 1)))
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr
    items = sum(int(n) for n, _ in SUMMARY.findall(last))
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest exited {proc.returncode}: {last}\n{proc.stderr[-2000:]}")
    return items, wall, last, others, own_seconds() - own


def paired(ratios: list[float]) -> str:
    """What the ratios of paired runs (this tree's wall over the other's, run beside it)
    show: a change shows only where every pair agrees on its direction."""
    spread = f"pairs {min(ratios):.2f} to {max(ratios):.2f}"
    if len(ratios) < 2:
        return f"{spread}: one pair shows no difference (--repeat 2 or more)"
    if max(ratios) < 1:
        return f"{spread}: faster in every pair"
    if min(ratios) > 1:
        return f"{spread}: slower in every pair"
    return f"{spread}: no difference shown (the pairs disagree)"


def unquiet(runs: dict[str, list[tuple]]) -> list[str]:
    """Why these runs are no figure to record (empty: they are)."""
    why = []
    for label, done in runs.items():
        busiest = max((r[3] for r in done if r[3] is not None), default=None)
        if busiest is None:
            why.append(f"{label}: the machine's CPU time cannot be read (no /proc/stat)")
        elif busiest >= QUIET:
            why.append(f"{label}: other processes took {busiest:.0%} of the cores during a "
                       f"run (at most {QUIET:.0%})")
        walls = sorted(r[1] for r in done)
        if len(walls) < 2:
            why.append(f"{label}: one run cannot show that runs agree (--repeat 2 or more)")
        elif walls[1] > walls[0] * (1 + AGREE):
            why.append(f"{label}: the two best runs differ by {walls[1] / walls[0] - 1:.0%} "
                       f"(at most {AGREE:.0%})")
    return why


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs per mode (best is shown)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--bytecode-cache", action="store_true",
                      help="let Python cache bytecode (unset PYTHONDONTWRITEBYTECODE)")
    mode.add_argument("--cold", action="store_true",
                      help="remove pytest's cached rewritten bytecode before every run")
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--record", type=Path, metavar="PATH",
                      help="put what is printed, with the machine, into this JSON file")
    kept.add_argument("--against", metavar="REV",
                      help="time git revision REV's suite too, run by run beside this one's")
    args, extra = parser.parse_known_args()
    env = dict(os.environ)
    if args.bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="amp-against-") as folder:
        trees = {"": env}
        if args.against:
            rev = revision_tree(args.against, Path(folder))
            path = os.pathsep.join(filter(None, [folder, env.get("PYTHONPATH")]))
            trees = {f" ({rev})": {**env, "PYTHONPATH": path}, "": env}
        return measure(args, extra, trees)


def measure(args: argparse.Namespace, extra: list[str], trees: dict[str, dict[str, str]]) -> int:
    """Run each mode of each tree (its label's suffix: its environment) in turn, print the
    best of each and record them (``--record``)."""
    env = trees[""]
    if args.bytecode_cache:
        for tree_env in trees.values():
            run(extra, None, tree_env)  # fills the cache
    import torch

    from amp_conformance.tools import guide_walk

    host = guide_walk.machine()  # as the runs begin: the load average says what else ran
    width = max(len(f"-n 2{tree}") for tree in trees) + 6
    cached = "none (--cold)" if args.cold else f"{len(rewritten())} files"
    lines = [f"torch {torch.__version__}, {os.cpu_count()} cores "
             f"({torch.backends.cpu.get_cpu_capability()}), PYTHONDONTWRITEBYTECODE "
             f"{'set' if env.get('PYTHONDONTWRITEBYTECODE') else 'unset'}, pytest's rewritten "
             f"bytecode cached: {cached}",
             f"{'mode':<{width}} {'items':>6} {'wall s':>8} {'items/s':>8}  summary"]
    print("\n".join(lines))
    modes = (("serial", None), ("-n 2", 2))
    # Alternated, so that a machine slowing down or speeding up during the runs weighs on
    # both modes (and both trees) alike; the best run of each is shown.
    runs: dict[str, list[tuple[int, float, str, float | None, float]]] = {
        label + tree: [] for label, _ in modes for tree in trees}
    for _ in range(args.repeat):
        for label, workers in modes:
            for tree, tree_env in trees.items():
                runs[label + tree].append(run(extra, workers, tree_env, args.cold))
    best = {}
    for label in runs:
        items, wall, last, *_ = min(runs[label], key=lambda r: r[1])
        best[label] = wall
        lines.append(f"{label:<{width}} {items:>6} {wall:>8.2f} {items / wall:>8.1f}  {last}")
        print(lines[-1])
    for tree in trees:
        lines.append(f"-n 2 / serial wall{tree}: {best['-n 2' + tree] / best['serial' + tree]:.2f}")
        print(lines[-1])
    for tree in trees:
        if tree:
            for label, _ in modes:
                for i, what in ((1, "wall"), (4, "CPU time")):
                    pairs = [mine[i] / theirs[i] for mine, theirs
                             in zip(runs[label], runs[label + tree], strict=True)]
                    least = min(r[i] for r in runs[label]) / min(r[i] for r in runs[label + tree])
                    lines.append(f"{label}: {least:.2f} of{tree}'s {what}; {paired(pairs)}")
                    print(lines[-1])
    why = unquiet(runs)
    lines.append("quiet: " + ("yes (other processes under "
                              f"{QUIET:.0%} of the cores in every run, each mode's best two "
                              f"within {AGREE:.0%})" if not why else "no: " + "; ".join(why)))
    print(lines[-1])
    if why:
        if args.record:
            print(f"suite_speed: nothing recorded in {args.record}: the machine was not quiet")
        return 3
    if args.record:
        record(args.record, [a for a in sys.argv[1:] if not a.startswith("--record")
                             and a != str(args.record)], lines, host)
    return 0


def record(path: Path, argv: list[str], lines: list[str], host: dict) -> None:
    """Put this benchmark's output, run on ``host``, into the record file ``path``,
    replacing the record of the same arguments."""
    from amp_conformance.tools import guide_walk

    new = {"command": " ".join(["python benchmarks/suite_speed.py", *argv]),
           "machine": host, "commit": guide_walk.commit(working_tree=True),
           "date": datetime.date.today().isoformat(), "output": lines}
    records = json.loads(path.read_text(encoding="utf-8"))["records"] if path.exists() else []
    same = [i for i, r in enumerate(records) if r["command"] == new["command"]]
    if same:  # in its place: the pages quote the file's first record
        records[same[0]] = new
    else:
        records.append(new)
    path.write_text(json.dumps({"records": records}, indent=1) + "\n", encoding="utf-8")
    print(f"suite_speed: recorded in {path}")

if __name__ == "__main__":
    sys.exit(main())
