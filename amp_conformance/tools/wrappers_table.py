"""docs/wrappers.md's table: what real libraries' autocast wrappers do today.

``nox -s "wrappers(<library>)"`` installs one library beside torch, runs the wrapper tier
against its declaration (the folder ``examples/wrappers/<library>/``: its declaration module
and its ``integration.toml``) and leaves, in ``reports/wrappers/``:

- ``<library>.json``: the tier's conformance report (docs/report-schema.md);
- ``<library>.meta.json``: ``{"library", "version", "torch", "wrappers": [names]}`` from the
  declaration module;
- or ``<library>.blocked.json``: ``{"library", "reason"}`` where the library could not be
  installed or imported (then nothing else);
- optionally ``<library>.cuda-fake.json`` and ``<library>.mps-fake.json``: the same
  library's run on a fake cuda or mps device (``--device cuda --fake``, no GPU or Mac
  needed), its rows kept apart by their device.

:func:`summarize` turns that directory into one compact summary (``docs/data/wrappers-observed.json``
is the committed one), :func:`markdown` turns a summary into the table, and ``--write``
puts it between the markers of docs/wrappers.md::

    python -m amp_conformance.tools.wrappers_table --reports reports/wrappers \\
        --summary docs/data/wrappers-observed.json --write docs/wrappers.md
    python -m amp_conformance.tools.wrappers_table --summary docs/data/wrappers-observed.json \\
        --write docs/wrappers.md           # regenerate from the committed summary

Summarizing a reports directory keeps the committed rows of the libraries (and devices) it
does not hold, so one library's session updates its own rows alone. A project test keeps
docs/wrappers.md's table equal to what :func:`markdown` makes from the committed summary.
"""

from __future__ import annotations

import re
from pathlib import Path

from amp_conformance.tools.matrix import read_json
from amp_conformance.tools.observed_table import Table

BEGIN = "<!-- wrappers-table:begin -->"
END = "<!-- wrappers-table:end -->"
FAILING = ("failed", "error", "xpassed", "unfinished")
COLUMNS = ("library", "version", "device", "wrapper", "check", "result", "whose",
           "reproduction")
#: the runs of a library a reports directory may hold: the file's suffix, and the options
#: that reproduce one of its items through the library's session
RUNS = (("", ()), (".cuda-fake", ("--device", "cuda", "--fake")),
        (".mps-fake", ("--device", "mps", "--fake")))
CPU = "cpu"
#: an expected failure whose reason starts so is PyTorch's departure met through a library;
#: every other one is the library's own
PYTORCH = "PyTorch"


def whose(row: dict) -> str:
    """Whose departure a failing row is: the library's or PyTorch's (declared as an expected
    failure), or nobody's yet (a failure no declaration explains)."""
    if row["result"] != "xfailed":
        return "unexplained"
    return "PyTorch" if (row.get("message") or "").startswith(PYTORCH) else "library"



def session_command(library: str, select: str | None = None,
                    options: tuple[str, ...] = ()) -> str:
    """The command that reproduces a library's run (one item of it with ``select``; on
    another device with ``options``)."""
    base = f'nox -s "wrappers({library})"'
    return f"{base} -- {' '.join((*options, ''))}-k '{select}'" if select else base


def _device(report: dict) -> str:
    """The device a report's run checked: ``cpu``, or ``cuda (fake)``."""
    return f"{report.get('device') or CPU}{' (fake)' if report.get('fake') else ''}"


def _wrapper_of(result: dict, names: list[str]) -> str | None:
    """The wrapper an item checked: the report's ``wrapper`` object (its ``name``), else the
    longest declared name in the node id."""
    w = result.get("wrapper")
    if isinstance(w, dict) and w.get("name"):
        return str(w["name"])
    if isinstance(w, str) and w:
        return w
    found = [n for n in names if n in (result.get("nodeid") or "")]
    return max(found, key=len) if found else None


def _headline(message: str | None) -> str:
    """A failure's first line without the exception's module path (``amp_conformance.core.
    errors.ConformanceFailure: wrapper ...`` -> ``wrapper ...``)."""
    lines = (message or "").strip().splitlines()
    return re.sub(r"^(?:[A-Za-z_][\w]*\.)+\w+: ", "", lines[0]) if lines else ""


def _whole(message: str | None) -> str:
    """A skip's reason whole, its lines joined (its cause may be on the second)."""
    return " ".join(line.strip() for line in (message or "").splitlines() if line.strip())


def _select(result: dict) -> str:
    """A ``-k`` expression for one item: its test name and parametrization id."""
    nodeid = result.get("nodeid") or ""
    return nodeid.rsplit("::", 1)[-1]


def summarize(root: Path) -> dict:
    """The summary of a directory of wrapper-tier reports (layout in the module docstring)."""
    libraries, rows = [], []
    keys = sorted({p.name.split(".", 1)[0] for p in root.glob("*.json")})
    for key in keys:
        blocked = read_json(root / f"{key}.blocked.json")
        meta = read_json(root / f"{key}.meta.json")
        library = meta.get("library") or blocked.get("library") or key
        if blocked:
            libraries.append({"session": key, "library": library, "version": blocked.get("version"),
                              "status": "blocked", "reason": blocked.get("reason", "")})
            continue
        runs = [(read_json(root / f"{key}{suffix}.json"), options) for suffix, options in RUNS]
        # a library whose reports are unreadable gets one (CPU) entry saying so
        for report, options in [r for r in runs if r[0]] or runs[:1]:
            found = _run(key, library, meta, report, options)
            libraries.append(found[0])
            rows += found[1]
    return {"source": "tier", "libraries": libraries, "rows": rows}


def _run(key: str, library: str, meta: dict, report: dict, options: tuple[str, ...]
         ) -> tuple[dict, list[dict]]:
    """One run of a library: its entry and its rows."""
    run, device, rows = report.get("run") or {}, _device(report), []
    entry = {"session": key, "library": library, "version": meta.get("version"),
             "torch": report.get("torch") or meta.get("torch"), "device": device,
             "status": run.get("status") or ("unreadable" if not report else "completed")}
    names = list(meta.get("wrappers") or [])
    for result in report.get("results") or []:
        wrapper = _wrapper_of(result, names)
        if wrapper is None:
            continue
        outcome = result.get("outcome") or "unknown"
        passed = outcome == "passed"
        w = result["wrapper"] if isinstance(result.get("wrapper"), dict) else {}
        check = w.get("check") or result.get("check") or result.get("test")
        rows.append({"session": key, "library": library, "version": meta.get("version"),
                     "device": device, "wrapper": wrapper, "check": check,
                     "item": w.get("precision") or result.get("param") or _select(result),
                     "result": outcome,
                     "message": "" if passed else _whole(result.get("message"))
                     if outcome == "skipped" else _headline(result.get("message")),
                     "command": "" if passed else session_command(key, _select(result),
                                                                  options)})
    return entry, rows


def _key(entry: dict) -> tuple[str, str]:
    return entry["session"], entry.get("device") or CPU


def merge(committed: dict, made: dict) -> dict:
    """The summary just made, with the committed libraries (and devices) it does not hold."""
    held = {_key(lib) for lib in made.get("libraries") or []}
    blocked = {lib["session"] for lib in made.get("libraries") or []
               if lib.get("status") == "blocked"}

    def kept(entry: dict) -> bool:
        return _key(entry) not in held and entry["session"] not in blocked
    # in the order summarize gives (libraries and their devices sorted, rows in run order)
    return {"source": made.get("source"),
            "libraries": sorted([lib for lib in committed.get("libraries") or [] if kept(lib)]
                                + list(made.get("libraries") or []), key=_key),
            "rows": sorted([r for r in committed.get("rows") or [] if kept(r)]
                           + list(made.get("rows") or []), key=_key)}


def _family(check: str) -> str:
    return check.split("[", 1)[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(summary: dict) -> list[str]:
    """One row per library, wrapper and check (its items counted), blocked libraries too."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "| " + " | ".join("---" for _ in COLUMNS) + " |"]
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for row in summary.get("rows") or []:
        groups.setdefault((*_key(row), row["wrapper"], _family(row["check"])), []).append(row)
    for lib in sorted(summary.get("libraries") or [], key=_key):
        version, device = lib.get("version") or "—", lib.get("device") or CPU
        if lib.get("status") == "blocked":
            lines.append(f"| {lib['library']} | {version} | — | — | — | **blocked** | — | "
                         f"{_cell(lib.get('reason', ''))}; `{session_command(lib['session'])}` |")
            continue
        mine = [k for k in groups if k[:2] == _key(lib)]
        if not mine:
            lines.append(f"| {lib['library']} | {version} | {device} | — | — | **no wrapper "
                         f"results** ({lib.get('status')}) | — | "
                         f"`{session_command(lib['session'])}` |")
        wrappers = list(dict.fromkeys(k[2] for k in mine))
        for key in sorted(mine, key=lambda k: (wrappers.index(k[2]), k[3])):
            items = groups[key]
            bad = [r for r in items if r["result"] in FAILING]
            departs = [r for r in items if r["result"] == "xfailed"]
            ran = [r for r in items if r["result"] == "passed"]
            owner = "—"
            if bad or departs:  # a departure declared as an expected failure is still one
                first = (bad or departs)[0]
                what = first["result"] if bad else "departs (strict expected failure)"
                result = f"**{what}**: {len(bad or departs)} of {len(items)}"
                repro = f"{_cell(first.get('message') or '')} (`{first['item']}`); `{first['command']}`"
                owner = whose(first)
            elif ran:
                result, repro = f"passed ({len(ran)})", ""
            else:
                result = f"skipped ({len(items)})"
                repro = _cell(items[0].get("message") or "")
            lines.append(f"| {lib['library']} | {version} | {device} | `{key[2]}` | {key[3]} | "
                         f"{result} | {owner} | {repro} |")
    return lines


def markdown(summary: dict) -> str:
    source = summary.get("source")
    head = []
    if source != "tier":
        head = [f"> **Observed directly, not by the wrapper tier** ({source}): the lead "
                "regenerates this table from the tier's reports once it runs.", ""]
    torch = sorted({lib.get("torch") for lib in summary.get("libraries") or [] if lib.get("torch")})
    if torch:
        head += [f"torch {', '.join(torch)}, on a CPU; `cuda (fake)`: the same library run with "
                 "`--device cuda --fake` (no GPU: no values or autograd there).", ""]
    return "\n".join([*head, *table(summary)]) + "\n"


TABLE = Table(prog="python -m amp_conformance.tools.wrappers_table",
              description=__doc__.splitlines()[0], reports="reports/wrappers",
              session="nox -s wrappers", marker="*.json", summarize=summarize,
              markdown=markdown, begin=BEGIN, end=END, merge=merge)
write = TABLE.write
main = TABLE.main


if __name__ == "__main__":
    raise SystemExit(main())
