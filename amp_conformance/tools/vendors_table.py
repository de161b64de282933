"""docs/vendors.md's table: real out-of-tree autocast implementations, run through the suite.

``nox -s "vendor(<name>)"`` (e.g. ``vendor(xla)``) installs a backend from the package
registry into its own virtualenv, runs ``discover``, ``coverage`` and the supervised suite
from its folder (``examples/vendors/<name>/``, described by its ``integration.toml``) and
leaves, in ``reports/vendors/``:

- ``<name>.json``: the supervised run's report (docs/report-schema.md), whose ``excused``
  (the items a limit, a missing kernel or a transform's own departure spared, each proved
  independent of autocast) the table counts per mechanism and the backend's section lists;
- ``<name>.meta.json``: ``{"backend", "module", "version", "torch", "device", "command",
  "coverage", "wall_s"}``: what was run, and the coverage line.

:func:`summarize` turns that directory into one compact summary (``docs/data/vendors-observed.json``
is the committed one), :func:`markdown` turns it into the table and the departures, and
``--write`` puts them between the markers of docs/vendors.md::

    python -m amp_conformance.tools.vendors_table --reports reports/vendors \\
        --summary docs/data/vendors-observed.json --write docs/vendors.md
    python -m amp_conformance.tools.vendors_table --summary docs/data/vendors-observed.json \\
        --write docs/vendors.md            # regenerate from the committed summary

Each departure is an item the backend's ``xfail.txt`` declares (its reason names the
reproduction under ``examples/vendors/<name>/defects/``), grouped by that reason; failures
are grouped by cause (:mod:`amp_conformance.plugin.report.causes`). A project test keeps
docs/vendors.md equal to what :func:`markdown` makes from the committed summary.
"""

from __future__ import annotations

import re
from pathlib import Path

from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.banner import EXCUSES
from amp_conformance.tools.matrix import read_json
from amp_conformance.tools.observed_table import Table

BEGIN = "<!-- vendors-table:begin -->"
END = "<!-- vendors-table:end -->"
COUNTS = ("passed", "failed", "xfailed", "skipped", "error", "xpassed")


_DECLARED = re.compile(r" \[[^\]]*:\d+\]$")  # the "[xfail.txt:12]" of a declared line


def _reason(message: str | None) -> tuple[str, bool]:
    """An expected failure's reason (its first line, the ``[file:line]`` dropped), and
    whether an expected-failures file declared it (else the suite's own known PyTorch
    defect)."""
    first = ((message or "").strip().splitlines() or [""])[0]
    declared = _DECLARED.search(first)
    return (first[:declared.start()] if declared else first), declared is not None


def _xfails(results: list[dict], declared: bool) -> list[dict]:
    """The xfailed items (declared by the backend's file, or the suite's own) grouped by
    reason, largest first."""
    groups: dict[str, list[str]] = {}
    for r in results:
        if r.get("outcome") == "xfailed":
            reason, by_file = _reason(r.get("message"))
            if by_file == declared:
                groups.setdefault(reason, []).append(r.get("nodeid", ""))
    return [{"reason": reason, "count": len(items), "items": sorted(items)}
            for reason, items in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def _excused(report: dict) -> dict | None:
    """The run's excused items as its report counts them: ``count``, ``by_mechanism`` and each
    item with its evidence (one line, or one per excused entry of a transform item); None
    for a report from before excuses were counted, which says nothing of them."""
    found = report.get("excused")
    if not isinstance(found, dict):
        return None
    items = [{"nodeid": i.get("nodeid"), "outcome": i.get("outcome"),
              "mechanism": i.get("mechanism"),
              "evidence": ([str(e)[:300] for e in i["evidence"]]
                           if isinstance(i.get("evidence"), list) else str(i.get("evidence"))[:300])}
             for i in found.get("items") or []]
    return {"count": found.get("count", len(items)),
            "by_mechanism": dict(found.get("by_mechanism") or {}), "items": items}


def summarize(root: Path) -> dict:
    """The summary of a directory of vendor runs (layout in the module docstring)."""
    backends = []
    for meta_path in sorted(root.glob("*.meta.json")):
        key = meta_path.name.split(".", 1)[0]
        meta, report = read_json(meta_path), read_json(root / f"{key}.json")
        run = report.get("run") or {}
        results = report.get("results") or []
        backends.append({
            "session": key, **{k: meta.get(k) for k in ("backend", "module", "version", "device",
                                                        "command", "coverage", "wall_s")},
            "torch": report.get("torch") or meta.get("torch"),
            "status": run.get("status") or ("unreadable" if not report else "completed"),
            "exitstatus": run.get("exitstatus"), "processes": run.get("processes", 1),
            "counts": {k: (report.get("summary") or {}).get(k, 0) for k in COUNTS},
            "excused": _excused(report),
            "departures": _xfails(results, declared=True),
            "pytorch_defects": _xfails(results, declared=False),
            "failures": [{k: row[k] for k in ("cause", "count", "items")}
                         for row in causes.group(results)],
        })
    return {"backends": backends}


def merge(committed: dict, fresh: dict) -> dict:
    """The fresh summary's backends, and the committed ones no fresh run replaces (a
    ``nox -s "vendor(ipex)"`` alone keeps XLA's row), in session order."""
    rows = {b["session"]: b for b in committed.get("backends") or []}
    rows.update({b["session"]: b for b in fresh.get("backends") or []})
    return {"backends": [rows[k] for k in sorted(rows)]}


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _by_mechanism(excused: dict) -> str:
    """``"limits 6, missing kernels 6"`` (the verdict line's words), largest first."""
    return ", ".join(f"{EXCUSES.get(m, m)} {n}" for m, n in sorted(
        excused["by_mechanism"].items(), key=lambda kv: (-kv[1], kv[0])))


def _excused_cell(excused: dict | None) -> str:
    if excused is None:
        return "— (not counted)"
    return str(excused["count"]) + (f" ({_by_mechanism(excused)})" if excused["count"] else "")


def table(summary: dict) -> list[str]:
    lines = ["| backend | version | torch | device | passed | failed | xfailed | skipped | "
             "excused | run | coverage |", "| --- " * 11 + "|"]
    for b in summary.get("backends") or []:
        c = b["counts"]
        run = f"{b['status']}, exit {b.get('exitstatus')}, {b.get('processes', 1)} process" + (
            "es" if b.get("processes", 1) != 1 else "")
        lines.append(f"| {b.get('backend')} (`{b.get('module')}`) | {b.get('version')} | "
                     f"{b.get('torch')} | {b.get('device')} | {c['passed']} | "
                     f"{c['failed'] + c['error'] + c['xpassed']} | {c['xfailed']} | "
                     f"{c['skipped']} | {_excused_cell(b.get('excused'))} | {run} | "
                     f"{_cell(b.get('coverage') or '—')} |")
    return lines


def _items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _excuse(item: dict) -> str:
    """One excused item: its test, outcome and evidence (a transform item's entries by id)."""
    evidence = item.get("evidence")
    if isinstance(evidence, list):
        said = (f"{len(evidence)} entr{'y' if len(evidence) == 1 else 'ies'}: "
                + ", ".join(e.split(":", 1)[0] for e in evidence))
    else:
        said = _cell(evidence or "")[:200] + ("…" if len(evidence or "") > 200 else "")
    test = (item.get("nodeid") or "").rsplit("::", 1)[-1]
    return f"- {item.get('mechanism')}: `{test}` ({item.get('outcome')}) — {said}"


def _excuses(backend: dict) -> list[str]:
    """The excused items, each with what proved its failure not autocast's."""
    excused = backend.get("excused")
    if not excused or not excused["count"]:
        return []
    order = list(EXCUSES)
    items = sorted(excused["items"], key=lambda i: (
        order.index(i.get("mechanism")) if i.get("mechanism") in order else len(order),
        i.get("nodeid") or ""))
    return [f"Excused ({_items(excused['count'])}: {_by_mechanism(excused)}; each failure "
            "shown on the item itself not to be autocast's, the report's `excused` has the "
            "evidence):", "", *map(_excuse, items), ""]


def details(backend: dict) -> list[str]:
    """The run's command, then each departure with its evidence, the excused items, then
    any failure."""
    lines = [f"### {backend.get('backend')} {backend.get('version')}", "",
             f"`{backend.get('command')}`" + (f" ({backend['wall_s']:.0f} s)"
                                             if backend.get("wall_s") else ""), ""]
    departures = backend.get("departures") or []
    if departures:
        lines += [f"Departures ({_items(sum(d['count'] for d in departures))}, declared in "
                  "xfail.txt; each reason names its reproduction):", ""]
        lines += [f"- **{d['count']}** × {_cell(d['reason'])} — `{d['items'][0]}`"
                  + (f" and {d['count'] - 1} more" if d["count"] > 1 else "")
                  for d in departures]
        lines.append("")
    lines += _excuses(backend)
    known = backend.get("pytorch_defects") or []
    if known:
        lines += [f"PyTorch's own known defects met on this torch "
                  f"({_items(sum(d['count'] for d in known))}, recorded in the suite, "
                  "expected on every device):", ""]
        lines += [f"- **{d['count']}** × {_cell(d['reason'])[:160]}"
                  + ("…" if len(d["reason"]) > 160 else "") + f" — `{d['items'][0]}`"
                  for d in known]
        lines.append("")
    failures = backend.get("failures") or []
    if failures:
        lines += [f"Failures ({causes.headcount(failures)}):", ""]
        lines += [f"- **{f['count']}** × {_cell(f['cause'])} — `{f['items'][0]}`"
                  for f in failures]
        lines.append("")
    return lines


def markdown(summary: dict) -> str:
    body = table(summary) + [""]
    for backend in summary.get("backends") or []:
        body += details(backend)
    return "\n".join(body).rstrip("\n") + "\n"


TABLE = Table(prog="python -m amp_conformance.tools.vendors_table",
              description=__doc__.splitlines()[0], reports="reports/vendors",
              session="nox -t vendors", marker="*.meta.json", summarize=summarize,
              markdown=markdown, begin=BEGIN, end=END, merge=merge)
write = TABLE.write
main = TABLE.main


if __name__ == "__main__":
    raise SystemExit(main())
