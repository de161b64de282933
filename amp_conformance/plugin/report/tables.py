"""A report's count tables: per check family and per op-list category, the outcomes, the
pass rate, the items and their own time; why each family's items were skipped; the run's
wall time and each tier's. HTML and Markdown, pure functions of the report's data."""

from __future__ import annotations

import html
from typing import Any

from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.banner import percent
from amp_conformance.plugin.report.journal import families


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def rate_cell(rate: float | None) -> str:
    if rate is None:
        return '<span class="muted">—</span>'
    pct = 100 * rate
    return f'<span class="bar"><span style="width:{pct:.1f}%"></span></span>{pct:.1f}%'


_COUNT_COLUMNS = ("passed", "failed", "error", "xfailed", "xpassed", "skipped", "not_applicable")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s" if value >= 1 else f"{value * 1000:.0f} ms"


def _count_cell(kind: str, name: str, column: str, row: dict[str, Any],
                skips: dict[str, list[dict[str, Any]]]) -> str:
    css = "num fail" if column in ("failed", "error") and row.get(column) else "num"
    value = row.get(column, 0)
    why = skips.get(name) if kind == "family" and column == "skipped" and value else None
    if why:  # the count links to the family's skip causes, the largest on hover
        value = (f'<a href="#skips-family-{_e(name)}" title="{_e(why[0]["cause"])}">'
                 f"{value}</a>")
    return f'<td class="{css}">{value}</td>'


def count_table(kind: str, rows: dict[str, dict[str, Any]], empty: str,
                skips: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """Counts per outcome, the pass rate and the items' own time, one row per category or
    check family (a family's skipped count links to why, ``skips``)."""
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    skips = skips or {}
    timed = all("seconds" in row for row in rows.values())
    head = f"<tr><th>{_e(kind)}</th>" + "".join(
        f"<th>{_e(c.replace('_', ' '))}</th>" for c in _COUNT_COLUMNS) + "<th>pass rate</th>" + (
        "<th>items</th><th>time</th>" if timed else "") + "</tr>"
    body = "".join(
        f"<tr><td>{_e(name)}</td>" + "".join(
            _count_cell(kind, name, c, row, skips) for c in _COUNT_COLUMNS)
        + f"<td>{rate_cell(row.get('pass_rate'))}</td>"
        + (f'<td class="num">{row["items"]}</td><td class="num">{_seconds(row["seconds"])}</td>'
           if timed else "") + "</tr>" for name, row in rows.items())
    return f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"


def family_skips(skips: dict[str, list[dict[str, Any]]]) -> str:
    """Why each family's items were skipped, folded: a family per line, its causes inside."""
    if not skips:
        return ""
    blocks = "".join(
        f'<details id="skips-family-{_e(family)}"><summary>{_e(family)}: '
        f'{sum(r["count"] for r in rows)} skipped, {len(rows)} causes</summary><table><tbody>'
        + "".join(f"<tr><td class='num'>{r['count']}</td><td>{_e(r['cause'])}</td></tr>"
                  for r in rows)
        + "</tbody></table></details>" for family, rows in skips.items())
    return f'<div class="muted">Why items were skipped, by family:</div>{blocks}'


def timing(data: dict[str, Any]) -> str:
    """One line: the run's wall time and each tier's items and own time (empty for a report
    older than the timings)."""
    tiers, wall = data.get("tiers"), (data.get("run") or {}).get("wall")
    if not tiers:
        return ""
    parts = [f"{name} {row['items']} items, {_seconds(row['seconds'])}"
             + (f" ({row['option']})" if row.get("option") else "")
             for name, row in tiers.items() if row["items"]]
    return (f"Wall {_seconds(wall)}; the items' own time (setup, call and teardown, summed over "
            f"workers) by tier: {' · '.join(parts)}")


def family_rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's per-family counts (computed from the results for an older report)."""
    return data.get("families") or families(data.get("results") or [])


def md_table(kind: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    timed = all("seconds" in row for row in rows.values())
    lines = [f"| {kind} | passed | failed | errors | xfailed | skipped | pass rate |"
             + (" items | time |" if timed else ""),
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if timed else "")]
    lines += [f"| {name} | {row['passed']} | {row['failed']} | {row['error']} | {row['xfailed']} | "
              f"{row['skipped']} | {percent(row['pass_rate'])} |"
              + (f" {row['items']} | {_seconds(row['seconds'])} |" if timed else "")
              for name, row in rows.items()]
    return [*lines, ""]


def md_family_skips(data: dict[str, Any]) -> list[str]:
    """Each family's skips in a line: how many, the largest cause, how many causes more."""
    skips = causes.skips_by_family(data)
    if not skips:
        return []
    lines = ["Why items were skipped, by family:", ""]
    for family in (f for f in family_rows(data) if f in skips):
        rows = skips[family]
        more = f"; {len(rows) - 1} more causes" if len(rows) > 1 else ""
        lines.append(f"- {family}: {sum(r['count'] for r in rows)} skipped — {rows[0]['count']} "
                     f"× {rows[0]['cause']}{more}")
    return [*lines, ""]
