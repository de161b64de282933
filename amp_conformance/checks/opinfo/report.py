"""The report's operator-surface table (the ``--amp-opinfo`` tier): every op_db op of
the run accounted for, by what it is under autocast and how its sample forms ended.

Each tier item carries its summary (``amp_opinfo``: kind, sample forms by outcome, the
policy overloads it entered); items without one were skipped before any sample ran (their
reason is the item's message) or failed before summarizing.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

#: the summary's kinds and sample outcomes, in the order the table shows them
KINDS = ("policy op", "composite", "left alone")
FORM_OUTCOMES = ("agrees", "capability", "defect", "n/a", "failed")


def operator_surface(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per amp dtype and kind: ops, their items' outcomes and their sample forms by
    outcome; None when the run had no tier item."""
    items = [r for r in results if r.get("check") == "opinfo"]
    if not items:
        return None
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for r in items:
        summary = r.get("opinfo") or {}
        kind = summary.get("kind") or ("not run here" if r["outcome"] == "skipped" else "no summary")
        row = table.setdefault(r.get("amp_dtype") or "?", {}).setdefault(
            kind, {"ops": 0, "items": Counter(), "forms": Counter(), "drawn": Counter()})
        row["ops"] += 1
        row["items"][r["outcome"]] += 1
        row["forms"].update(summary.get("outcomes", {}))
        row["drawn"].update({k: summary.get(k, 0) for k in DRAWN})
    return {dtype: {kind: {"ops": row["ops"], "items": dict(row["items"]), "forms": dict(row["forms"]),
                           "drawn": {k: row["drawn"][k] for k in DRAWN}}
                    for kind, row in sorted(rows.items(), key=lambda kv: _order(kv[0]))}
            for dtype, rows in sorted(table.items())}


#: what each item drew (checks/opinfo/calls.py counts): argument forms and samples,
#: available and drawn, and the keyword values that needed a second sample
DRAWN = ("forms_drawn", "forms", "samples_drawn", "samples", "forms_redrawn")
HEADS = ("amp dtype", "kind", "ops", "passed", "failed", "skipped", "argument forms drawn",
         "samples drawn", "keyword values redrawn", *(f"calls {o}" for o in FORM_OUTCOMES))


def _cells(dtype: str, kind: str, row: dict[str, Any]) -> list[Any]:
    items, forms, drawn = row["items"], row["forms"], row.get("drawn") or {}
    return [dtype, kind, row["ops"], items.get("passed", 0),
            items.get("failed", 0) + items.get("error", 0), items.get("skipped", 0),
            f"{drawn.get('forms_drawn', 0)}/{drawn.get('forms', 0)}",
            f"{drawn.get('samples_drawn', 0)}/{drawn.get('samples', 0)}",
            drawn.get("forms_redrawn", 0), *(forms.get(o, 0) for o in FORM_OUTCOMES)]


def _order(kind: str) -> tuple[int, str]:
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def markdown(surface: dict[str, Any] | None) -> list[str]:
    """The table as Markdown lines (none without the tier)."""
    if not surface:
        return []
    lines = ["### Operator surface (--amp-opinfo)", "", "| " + " | ".join(HEADS) + " |",
             "| --- " * len(HEADS) + "|"]
    lines += ["| " + " | ".join(str(c) for c in _cells(dtype, kind, row)) + " |"
              for dtype, rows in surface.items() for kind, row in rows.items()]
    return [*lines, ""]


def html(surface: dict[str, Any] | None, escape: Any) -> str:
    """The same table for the HTML page (empty without the tier)."""
    if not surface:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADS)
    body = ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _cells(dtype, kind, row)) + "</tr>"
            for dtype, rows in surface.items() for kind, row in rows.items()]
    return (f"<h2>Operator surface (--amp-opinfo)</h2><table><tr>{head}</tr>"
            + "".join(body) + "</table>")
