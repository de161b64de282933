"""Compare where two conformance runs spent their time, from their JSON reports.

    python benchmarks/compare_reports.py BEFORE.json AFTER.json [--items N]
    python benchmarks/compare_reports.py REPORT.json             # one run's figures alone

Prints the runs' wall time, then per tier and per check family the items and their own
time (setup, call and teardown; summed over workers under xdist) before and after, the
difference and the ratio, the slowest families of AFTER first; then AFTER's slowest items
with BEFORE's time for the same item. The figures are the reports' own
(``docs/report-schema.md``: ``run.wall``, ``tiers``, ``families``, each result's ``seconds``);
a report written before the timings existed has none, and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"compare_reports: cannot read {path}: {exc}") from None
    if "tiers" not in data:
        raise SystemExit(f"compare_reports: {path} has no timings (a report older than the "
                         "per-family times: run the suite again with --conformance-report)")
    return data


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row(name: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    b = before["seconds"] if before else None
    a = after["seconds"] if after else None
    delta = f"{a - b:+.2f}" if a is not None and b is not None else "-"
    ratio = f"{a / b:.2f}" if a is not None and b else "-"
    items = "/".join(str(x["items"]) if x else "-" for x in (before, after))
    return f"| {name} | {items} | {_s(b)} | {_s(a)} | {delta} | {ratio} |"


def table(title: str, before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
          ) -> list[str]:
    names = sorted(set(before) | set(after),
                   key=lambda n: -(after.get(n) or before.get(n) or {}).get("seconds", 0.0))
    return [f"| {title} | items (before/after) | before s | after s | difference s | ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
            *(_row(n, before.get(n), after.get(n)) for n in names), ""]


def compare(before: dict[str, Any], after: dict[str, Any], items: int = 15) -> str:
    """The Markdown comparison of two reports (the same report twice: its figures alone)."""
    wall = [r.get("run", {}).get("wall") for r in (before, after)]
    lines = [f"Wall: before {_s(wall[0])} s, after {_s(wall[1])} s "
             f"({before.get('device')} → {after.get('device')}, torch {before.get('torch')} → "
             f"{after.get('torch')})", ""]
    lines += table("tier", before["tiers"], after["tiers"])
    lines += table("check family", before["families"], after["families"])
    seconds = {r["nodeid"]: r.get("seconds") for r in before.get("results", ())}
    slowest = sorted(after.get("results", ()), key=lambda r: -(r.get("seconds") or 0.0))[:items]
    lines += [f"The slowest {len(slowest)} items of the after run:", "",
              "| item | before s | after s |", "| --- | ---: | ---: |"]
    lines += [f"| `{r['nodeid'].split('::', 1)[-1]}` | {_s(seconds.get(r['nodeid']))} | "
              f"{_s(r.get('seconds'))} |" for r in slowest]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json",
                        help="BEFORE.json AFTER.json, or one report")
    parser.add_argument("--items", type=int, default=15, help="slowest items listed (default 15)")
    args = parser.parse_args(argv)
    if len(args.reports) > 2:
        parser.error("at most two reports: BEFORE.json AFTER.json")
    before, after = load(args.reports[0]), load(args.reports[-1])
    sys.stdout.write(compare(before, after, args.items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
