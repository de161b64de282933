"""``python -m amp_conformance matrix``: docs/versions.md's matrix table from the reports.

``nox -t matrix`` leaves one report per release and tier in ``reports/<release>/<tier>.json``
(``cpu``, ``cuda-fake``, ``xpu-fake``, ``mps-fake``). This command turns them into a
release × tier table of outcome counts, and the drift between consecutive releases per tier
(``amp_conformance.tools.drift``), and writes them between the markers of a document. A
project test keeps the table's releases equal to the noxfile's and the nightly workflow's.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from amp_conformance.core import generated
from amp_conformance.tools import drift

TIERS = ("cpu", "cuda-fake", "xpu-fake", "mps-fake")
BEGIN = ("<!-- generated from reports/ by `python -m amp_conformance matrix --reports reports "
         "--write docs/versions.md` -->")
END = "<!-- end of the generated matrix -->"


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in release.split("."))


def releases(root: Path) -> list[str]:
    """The releases with a report directory, oldest first."""
    found = [p.name for p in root.iterdir() if p.is_dir() and re.fullmatch(r"\d+\.\d+", p.name)]
    return sorted(found, key=_key)


def read_json(path: Path) -> dict:
    """A JSON object from ``path``; ``{}`` where it is missing, unreadable or not an object
    (a report of a run that never wrote one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cell(path: Path) -> str:
    if not path.is_file():
        return "—"
    data = read_json(path)
    s, run = data.get("summary") or {}, data.get("run") or {}
    if not s:
        return "**unreadable**"
    failed = s.get("failed", 0) + s.get("error", 0) + s.get("xpassed", 0)
    text = (f"{s.get('passed', 0)} passed, **{failed} failed**, {s.get('skipped', 0)} skipped "
            f"({s.get('not_applicable', 0)} n/a), {s.get('xfailed', 0)} xfailed")
    if run.get("status") != "completed":
        text = f"**did not complete** ({run.get('status')}): " + text
    return text.replace("**0 failed**", "0 failed")


def table(root: Path) -> list[str]:
    rows = ["| release | torch | " + " | ".join(f"`{t}`" for t in TIERS) + " |",
            "| --- | --- | " + " | ".join("---" for _ in TIERS) + " |"]
    for release in releases(root):
        version = next((read_json(root / release / f"{t}.json").get("torch") for t in TIERS
                        if (root / release / f"{t}.json").is_file()), None) or "—"
        cells = [_cell(root / release / f"{tier}.json") for tier in TIERS]
        rows.append(f"| {release} | {version} | " + " | ".join(cells) + " |")
    return rows


def drift_lines(root: Path) -> list[str]:
    """One line per tier and pair of consecutive releases: what changed, in counts."""
    lines = []
    found = releases(root)
    for tier in TIERS:
        pairs = [(a, b) for a, b in zip(found, found[1:], strict=False)
                 if (root / a / f"{tier}.json").is_file() and (root / b / f"{tier}.json").is_file()]
        for a, b in pairs:
            try:
                d = drift.compare(drift.load(root / a / f"{tier}.json"),
                                  drift.load(root / b / f"{tier}.json"))
            except drift.ReportError as exc:
                lines.append(f"- `{tier}` {a} → {b}: unreadable ({exc})")
                continue
            if d.identical:
                lines.append(f"- `{tier}` {a} → {b}: no drift")
                continue
            groups = d.groups()
            shown = ", ".join(f"`{g}`" for g in list(groups)[:6]) + (" …" if len(groups) > 6 else "")
            lines.append(f"- `{tier}` {a} → {b}: {drift._counts(d.changes)} — {shown}")
    return lines


def markdown(root: Path) -> str:
    return "\n".join([*table(root), "", "Drift between consecutive releases "
                      "(`python -m amp_conformance drift reports/<a>/<tier>.json "
                      "reports/<b>/<tier>.json` for the detail):", "", *drift_lines(root)]) + "\n"


def table_releases(text: str) -> list[str]:
    """The releases the generated table of a document names, in order."""
    body = generated.section(text, BEGIN, END) or ""
    return re.findall(r"^\| (\d+\.\d+) \|", body, flags=re.M)


def write(doc: Path, root: Path) -> bool:
    return generated.write(doc, BEGIN, END, markdown(root))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports", type=Path, default=Path("reports"),
                        help="the directory of reports/<release>/<tier>.json (default: reports)")
    parser.add_argument("--write", metavar="DOC", type=Path,
                        help="replace the generated section of DOC (docs/versions.md) instead "
                             "of printing the table")


def run(args: argparse.Namespace) -> int:
    if not args.reports.is_dir() or not releases(args.reports):
        print(f"error: no reports/<release>/ directories under {args.reports} "
              "(run nox -t matrix first)", file=sys.stderr)
        return 2
    if args.write:
        print(f"{args.write}: {'updated' if write(args.write, args.reports) else 'up to date'}")
    else:
        sys.stdout.write(markdown(args.reports))
    return 0
