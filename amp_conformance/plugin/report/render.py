"""Render a conformance report (the JSON of docs/report-schema.md) as a self-contained HTML
page and as a short Markdown summary for a CI job summary. Pure functions of the data."""

from __future__ import annotations

import html
import json
from typing import Any

from amp_conformance.checks import registry
from amp_conformance.core.errors import headline
from amp_conformance.plugin.report import causes, judged, tables
from amp_conformance.plugin.report.banner import (
    PROBLEMS,
    excused,
    excused_line,
    lost_by_op,
    outside_problems,
    partial_note,
    pass_rate,
    percent,
    quarantine_note,
    rate_note,
    restart_note,
    run_warning,
    verdict,
)

__all__ = ["render_html", "render_markdown"]

#: the per-entry checks, in registry order: the op matrix's columns
OP_CHECKS = registry.names(per_entry=True)
#: outcome -> (css class, cell symbol, legend label)
STYLE = {
    "passed": ("ok", "✓", "passed"),
    "failed": ("fail", "✗", "failed"),
    "error": ("fail", "E", "error"),
    "xfailed": ("xfail", "x", "expected failure"),
    "xpassed": ("xpass", "!", "passed, expected to fail"),
    "skipped": ("skip", "s", "skipped"),
    "n/a": ("na", "·", "not applicable"),
    "excused": ("excused", "e", "excused (the failure shown not to be autocast's)"),
}
_PROBLEMS = PROBLEMS

_CSS = """
:root { --ok:#1a7f37; --ok-bg:#dafbe1; --fail:#cf222e; --fail-bg:#ffebe9; --xfail:#9a6700;
  --xfail-bg:#fff8c5; --xpass:#8250df; --xpass-bg:#fbefff; --skip:#57606a; --skip-bg:#eaeef2; --na:#8c959f;
  --na-bg:#f6f8fa; --excused:#0550ae; --excused-bg:#ddf4ff; --line:#d0d7de; --text:#1f2328; --muted:#656d76; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--text);
  margin: 0; background: #fff; }
header { background: #24292f; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header .meta { color: #c9d1d9; font-size: 13px; }
main { padding: 8px 28px 40px; max-width: 1500px; }
h2 { font-size: 17px; margin: 28px 0 10px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin-top: 18px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 16px; min-width: 120px; }
.card .n { font-size: 24px; font-weight: 600; }
.card .l { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card.ok .n { color: var(--ok); } .card.fail .n { color: var(--fail); }
.card.xfail .n { color: var(--xfail); } .card.xpass .n { color: var(--xpass); }
.card.skip .n { color: var(--skip); }
.verdict { font-size: 1.15em; padding: 10px 14px; border-radius: 8px; }
.verdict.ok { background: var(--ok-bg); color: var(--ok); }
.verdict.fail { background: var(--fail-bg); color: var(--fail); }
.banner { border: 2px solid var(--fail); background: var(--fail-bg); color: var(--fail); padding: 10px 14px;
  border-radius: 8px; }
.bar { display: inline-block; width: 120px; height: 8px; background: var(--fail-bg);
  border-radius: 4px; overflow: hidden; vertical-align: middle; margin-right: 6px; }
.bar > span { display: block; height: 100%; background: var(--ok); }
table { border-collapse: collapse; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; }
th { background: #f6f8fa; font-weight: 600; font-size: 12px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.matrix td.cell { text-align: center; width: 30px; padding: 2px 4px; font-weight: 600; cursor: default; }
table.matrix th.dtype { text-align: center; }
table.matrix th.check { text-align: center; font-weight: 500; writing-mode: vertical-rl;
  transform: rotate(180deg); padding: 6px 2px; height: 72px; }
table.matrix tr.group td { background: #f6f8fa; font-weight: 600; }
td.ok { color: var(--ok); background: var(--ok-bg); }
td.fail { color: var(--fail); background: var(--fail-bg); }
td.xfail { color: var(--xfail); background: var(--xfail-bg); }
td.xpass { color: var(--xpass); background: var(--xpass-bg); }
td.skip { color: var(--skip); background: var(--skip-bg); }
td.na { color: var(--na); background: var(--na-bg); }
td.excused { color: var(--excused); background: var(--excused-bg); }
td.none { background: repeating-linear-gradient(45deg, #fff, #fff 3px, #f6f8fa 3px, #f6f8fa 6px); }
td.cell a { color: inherit; text-decoration: none; display: block; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
td.op code { color: var(--muted); }
.legend span { display: inline-block; margin-right: 14px; }
.legend b { display: inline-block; width: 22px; text-align: center; border-radius: 3px; margin-right: 4px; }
.controls { margin: 6px 0 10px; color: var(--muted); }
.controls input[type=search] { padding: 3px 8px; border: 1px solid var(--line); border-radius: 6px;
  width: 220px; }
details { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; }
details summary { padding: 6px 10px; cursor: pointer; }
details summary code { font-weight: 600; }
details pre { margin: 0; padding: 10px; background: #f6f8fa; overflow-x: auto; white-space: pre-wrap;
  border-top: 1px solid var(--line); }
details:target { outline: 2px solid var(--fail); }
.muted { color: var(--muted); }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; }
"""

_JS = """
function ampFilter() {
  var only = document.getElementById('only-problems').checked;
  var text = document.getElementById('filter').value.toLowerCase();
  document.querySelectorAll('table.filterable tr.row').forEach(function (tr) {
    var show = (!only || tr.dataset.problem === '1') &&
               (!text || tr.textContent.toLowerCase().indexOf(text) >= 0);
    tr.style.display = show ? '' : 'none';
  });
  document.querySelectorAll('table.filterable tr.group').forEach(function (g) {
    var n = g.nextElementSibling, any = false;
    while (n && !n.classList.contains('group')) {
      if (n.style.display !== 'none') any = true;
      n = n.nextElementSibling;
    }
    g.style.display = any ? '' : 'none';
  });
}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def expected_failures(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in data["results"] if r["outcome"] in ("xfailed", "xpassed")]


def state_of(result: dict[str, Any]) -> str:
    """A result's cell state: its outcome, excused and not-applicable skips apart."""
    if result["outcome"] == "skipped" and result.get("excuse"):
        return "excused"
    if result["outcome"] == "skipped" and (result.get("message") or "").startswith("not applicable"):
        return "n/a"
    return result["outcome"]


def _rest_of_param(result: dict[str, Any], device: str) -> str:
    """The parametrization id without the device and amp dtype parts."""
    param = result.get("param") or ""
    parts = [p for p in param.split("-") if p and p not in (device, result.get("amp_dtype"))]
    return "-".join(parts)


class _Failures:
    """Failure anchors: every failed/error/xpassed result gets one details block."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def anchor(self, result: dict[str, Any]) -> str:
        self.items.append(result)
        return f"f{len(self.items)}"


def _cell(result: dict[str, Any] | None, failures: _Failures) -> str:
    if result is None:
        return '<td class="cell none" title="not generated"></td>'
    state = state_of(result)
    css, symbol, label = STYLE.get(state, ("skip", "?", state))
    tip = f"{result['nodeid']}\n{label}"
    if result.get("message"):
        tip += f": {result['message']}"
    if len(tip) > 1500:
        tip = tip[:1500] + " …"
    if state in _PROBLEMS:
        return (f'<td class="cell {css}" title="{_e(tip)}"><a href="#{failures.anchor(result)}">'
                f"{symbol}</a></td>")
    return f'<td class="cell {css}" title="{_e(tip)}">{symbol}</td>'


def _legend() -> str:
    spans = "".join(
        f'<span><b class="{css}" style="background:var(--{css}-bg);color:var(--{css})">{sym}</b>'
        f"{_e(label)}</span>" for css, sym, label in STYLE.values() if css != "fail" or sym == "✗")
    return (f'<p class="legend">{spans}<span class="muted">hover a cell for its message, '
            'click a failure to jump to it</span></p>')


def _op_matrix(data: dict[str, Any], failures: _Failures) -> str:
    ops = [r for r in data["results"] if r.get("category") is not None]
    if not ops:
        return '<p class="muted">No op-list items in this run.</p>'
    dtypes = list(data.get("amp_dtypes") or [])
    for r in ops:
        if r.get("amp_dtype") and r["amp_dtype"] not in dtypes:
            dtypes.append(r["amp_dtype"])
    found = {r.get("check") for r in ops}
    checks = [c for c in OP_CHECKS if c in found] + sorted(c for c in found - set(OP_CHECKS) if c)
    cells: dict[tuple[str, str, str], dict[str, Any]] = {}
    rows: dict[str, dict[str, str]] = {}
    for r in ops:
        cells[(r["entry"], r.get("amp_dtype") or "", r.get("check") or "")] = r
        rows.setdefault(r["category"], {})[r["entry"]] = r.get("op") or ""
    head1 = '<tr><th rowspan="2">entry</th><th rowspan="2">op</th>' + "".join(
        f'<th class="dtype" colspan="{len(checks)}">{_e(d)}</th>' for d in dtypes) + "</tr>"
    head2 = "<tr>" + "".join(f'<th class="check">{_e(c)}</th>' for _ in dtypes for c in checks) + "</tr>"
    body = []
    width = 2 + len(dtypes) * len(checks)
    for category in sorted(rows):
        counts = data.get("categories", {}).get(category, {})
        body.append(f'<tr class="group"><td colspan="{width}">{_e(category)} '
                    f'<span class="muted">— pass rate {percent(counts.get("pass_rate"))}</span></td></tr>')
        for entry in sorted(rows[category]):
            row_cells = [cells.get((entry, d, c)) for d in dtypes for c in checks]
            problem = any(x is not None and state_of(x) in _PROBLEMS for x in row_cells)
            tds = "".join(_cell(x, failures) for x in row_cells)
            body.append(f'<tr class="row" data-problem="{int(problem)}"><td>{_e(entry)}</td>'
                        f'<td class="op"><code>{_e(rows[category][entry])}</code></td>{tds}</tr>')
    return (f'<table class="matrix filterable"><thead>{head1}{head2}</thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _generic_matrix(data: dict[str, Any], failures: _Failures) -> str:
    generic = [r for r in data["results"] if r.get("category") is None]
    if not generic:
        return '<p class="muted">No device-generic items in this run.</p>'
    device = data.get("device", "")
    dtypes = list(data.get("amp_dtypes") or [])
    columns = dtypes + ([""] if any(not r.get("amp_dtype") for r in generic) else [])
    rows: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for r in generic:
        key = (r.get("check") or "—", r.get("test") or r["nodeid"], _rest_of_param(r, device))
        rows.setdefault(key, {})[r.get("amp_dtype") or ""] = r
    head = ('<tr><th>test</th><th>variant</th>' + "".join(
        f'<th class="dtype">{_e(c) if c else "—"}</th>' for c in columns) + "</tr>")
    body = []
    last = None
    for key in sorted(rows):
        check, test, rest = key
        if check != last:
            body.append(f'<tr class="group"><td colspan="{2 + len(columns)}">{_e(check)}</td></tr>')
            last = check
        row_cells = [rows[key].get(c) for c in columns]
        problem = any(x is not None and state_of(x) in _PROBLEMS for x in row_cells)
        tds = "".join(_cell(x, failures) for x in row_cells)
        body.append(f'<tr class="row" data-problem="{int(problem)}"><td>{_e(test)}</td>'
                    f'<td class="muted">{_e(rest)}</td>{tds}</tr>')
    return (f'<table class="matrix filterable"><thead>{head}</thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _cards(data: dict[str, Any]) -> str:
    s, run = data["summary"], data.get("run") or {}
    total = sum(s.get(k, 0) for k in ("passed", "failed", "error", "xfailed", "xpassed", "skipped"))
    rate = None if run.get("not_run") else pass_rate(s)
    outside, _ = outside_problems(data)
    label = (f"pass rate ({run['not_run']} items not run)" if run.get("not_run")
             else f"pass rate ({outside} failures outside the op lists)" if outside else "pass rate")
    cards = [
        ("", total, "results"),
        ("ok", s.get("passed", 0), "passed"),
        ("fail", s.get("failed", 0), "failed"),
        ("fail", s.get("error", 0), "errors"),
        ("xfail", s.get("xfailed", 0), "expected failures"),
        ("xpass", s.get("xpassed", 0), "unexpected passes"),
        ("skip", s.get("skipped", 0), f"skipped ({s.get('not_applicable', 0)} not applicable)"),
        *([("fail", run["not_run"], "not run")] if run.get("not_run") else []),
        ("ok" if rate == 1 and not outside else "fail", percent(rate), label),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card {css}"><div class="n">{_e(n)}</div><div class="l">{_e(label)}</div></div>'
        for css, n, label in cards) + "</div>"


def notes(data: dict[str, Any]) -> list[str]:
    """The banner lines, most serious first: no verdict, restarted, partial."""
    return [n for n in (run_warning(data), quarantine_note(data), restart_note(data),
                        partial_note(data)) if n]


def _banner(data: dict[str, Any]) -> str:
    return "".join(f'<p class="banner fail"><strong>{_e(n)}</strong></p>' for n in notes(data))


def _verdict(data: dict[str, Any]) -> str:
    conforms, sentence = verdict(data)
    return f'<p class="verdict {"ok" if conforms else "fail"}"><strong>{_e(sentence)}</strong></p>'


def _xfail_list(data: dict[str, Any]) -> str:
    rows = expected_failures(data)
    if not rows:
        return '<p class="muted">No expected failures declared for this run.</p>'
    body = "".join(
        f"<tr><td><code>{_e(r['nodeid'])}</code></td><td>{_e(r['outcome'])}</td>"
        f"<td>{_e(headline(r.get('message')))}</td></tr>" for r in rows)
    return f"<table><thead><tr><th>item</th><th>outcome</th><th>declared reason</th></tr></thead>" \
           f"<tbody>{body}</tbody></table>"


def _defect_lines(data: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(defect, one-line verdict) per reference defect the run met."""
    out = []
    for d in data.get("reference_defects") or []:
        r, f = len(d["reproduced"]), len(d["fixed"])
        verdict = ("reproduces it" if r and not f else "fixes it" if f and not r
                   else "reproduces it in some items, fixes it in others")
        out.append((d, f"{verdict} ({r} item{'s' * (r != 1)} as PyTorch today, {f} as intended)"))
    return out


def _defect_list(data: dict[str, Any]) -> str:
    rows = _defect_lines(data)
    if not rows:
        return ('<p class="muted">This run met none of the recorded PyTorch defects '
                "(oplists/defects.toml).</p>")
    body = "".join(
        f"<tr><td><code>{_e(d['id'])}</code><br>{_e(d['summary'])}<br>"
        + " ".join(f'<a href="{_e(u)}">{_e(u)}</a>' for u in d["links"])
        + f"</td><td>{_e(verdict)}</td><td>"
        + "<br>".join(f"<code>{_e(n)}</code> {_e(kind)}" for kind in ("reproduced", "fixed")
                      for n in d[kind]) + "</td></tr>" for d, verdict in rows)
    return ("<table><thead><tr><th>PyTorch defect</th><th>this device</th><th>items</th>"
            f"</tr></thead><tbody>{body}</tbody></table>")


def _options_table(data: dict[str, Any]) -> str:
    rows = [("device", data.get("device")), ("fake", data.get("fake")),
            ("amp dtypes", ", ".join(data.get("amp_dtypes") or [])), ("numerics", data.get("numerics")),
            ("torch", data.get("torch")), ("python", data.get("python"))]
    for key, value in (data.get("options") or {}).items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, indent=1) if value else "—"
        rows.append((key.replace("_", " "), "—" if value is None else value))
    return "<table>" + "".join(
        f"<tr><th>{_e(k)}</th><td><pre style='margin:0'>{_e(v)}</pre></td></tr>" for k, v in rows
    ) + "</table>"


def _failure_list(failures: _Failures) -> str:
    if not failures.items:
        return '<p class="muted">No failures, errors or unexpected passes.</p>'
    blocks = []
    for i, r in enumerate(failures.items, 1):
        blocks.append(
            f'<details id="f{i}"><summary><code>{_e(r["nodeid"])}</code> '
            f'<span class="muted">{_e(r["outcome"])}</span> — {_e(headline(r.get("message")))}'
            f'</summary><pre>{_e(r.get("message") or "")}</pre></details>')
    return "".join(blocks)


def _limits(data: dict[str, Any]) -> str:
    line = causes.limits_line(data)
    return f'<p class="muted" id="limits">{_e(line)} (their items are skipped)</p>' if line else ""


def _evidence(item: dict[str, Any]) -> str:
    said = item.get("evidence")
    return "; ".join(said) if isinstance(said, list) else str(said or "")


def _excused(data: dict[str, Any]) -> str:
    """Every excused item, its mechanism and its evidence (folded)."""
    found = data.get("excused") or excused(data.get("results") or [])
    if not found["count"]:
        return ""
    body = "".join(f"<tr><td><code>{_e(i['nodeid'])}</code></td><td>{_e(i['mechanism'])}</td>"
                   f"<td>{_e(_evidence(i))}</td></tr>" for i in found["items"])
    return (f"<h2 id='excused'>Excused items</h2><details><summary>{_e(excused_line(data))}"
            "</summary><table><thead><tr><th>item</th><th>excuse</th><th>evidence (each "
            "proved independent of autocast)</th></tr></thead>"
            f"<tbody>{body}</tbody></table></details>")


def _md_excused(data: dict[str, Any], limit: int = 25) -> list[str]:
    found = data.get("excused") or excused(data.get("results") or [])
    if not found["count"]:
        return []
    lines = [f"### {excused_line(data)}", ""]
    lines += [f"- `{i['nodeid']}` ({i['mechanism']}): {_evidence(i)}" for i in found["items"][:limit]]
    if found["count"] > limit:
        lines.append(f"- … and {found['count'] - limit} more (see the HTML report)")
    return [*lines, ""]


def render_html(data: dict[str, Any]) -> str:
    failures = _Failures()
    skips = causes.skips_by_family(data)
    skips = {name: skips[name] for name in tables.family_rows(data) if name in skips}
    ops = _op_matrix(data, failures)
    generic = _generic_matrix(data, failures)
    mode = "fake (policy through FakeTensorMode)" if data.get("fake") else "real device"
    meta = (f"torch {data.get('torch')} · Python {data.get('python')} · {mode} · autocast dtypes "
            f"{', '.join(data.get('amp_dtypes') or []) or '—'} · numerics {data.get('numerics')}")
    controls = ('<div class="controls"><label><input type="checkbox" id="only-problems" '
                'onchange="ampFilter()"> only rows with failures</label> &nbsp; '
                '<input type="search" id="filter" placeholder="filter rows (op, entry, test)…" '
                'oninput="ampFilter()"></div>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>amp-conformance: {_e(data.get('device'))} · torch {_e(data.get('torch'))}</title>
<style>{_CSS}</style><script>{_JS}</script></head>
<body><header><h1>Autocast conformance — {_e(data.get('device'))}</h1>
<div class="meta">{_e(meta)}</div>
<div class="meta" id="judged">{_e(judged.line(data))}</div></header>
<main>
{_banner(data)}
{_verdict(data)}
{_cards(data)}
{causes.html(data, _e)}
{_limits(data)}
{_excused(data)}
<h2 id="families">By check family</h2>
{tables.count_table("family", tables.family_rows(data), "No items in this run.", skips)}
<p class="muted" id="timing">{_e(tables.timing(data))}</p>
{tables.family_skips(skips)}
{"".join(tier.html(data) for tier in registry.tiers())}
<h2 id="categories">By op-list category</h2>
{tables.count_table("category", data.get("categories") or {}, "No op-list items in this run.")}
<h2 id="oplists">Op lists: op × autocast dtype × check</h2>
{_legend()}
{controls}
{ops}
<h2 id="generic">Device-generic checks</h2>
{generic}
<h2 id="failures">Failures</h2>
{_failure_list(failures)}
<h2 id="xfails">Expected failures</h2>
{_xfail_list(data)}
<h2 id="defects">Reference defects: PyTorch's own, tracked apart</h2>
{_defect_list(data)}
{causes.html(data, _e, "skips")}
<h2 id="run">Run</h2>
{_options_table(data)}
<footer>Schema {_e(data.get('schema'))} · generated by amp-conformance
(<code>pytest --conformance-report</code>)</footer>
</main></body></html>
"""


def _md_list(title: str, rows: list[dict[str, Any]], limit: int) -> list[str]:
    if not rows:
        return []
    lines = [f"### {title} ({len(rows)})", ""]
    lines += [f"- `{r['nodeid']}` ({r['outcome']}): {headline(r.get('message'))}" for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"- … and {len(rows) - limit} more (see the HTML report)")
    return [*lines, ""]


def _md_lost(data: dict[str, Any], per_op: int = 5) -> list[str]:
    """The items that lost the device, grouped by the op the health probe blamed."""
    table = lost_by_op(data)
    if not table:
        return []
    items = sum(len(v) for v in table.values())
    lines = [f"### Lost the device, by op ({len(table)} ops, {items} items)", ""]
    for op, nodeids in table.items():
        shown = ", ".join(f"`{n}`" for n in nodeids[:per_op])
        more = f", … and {len(nodeids) - per_op} more" if len(nodeids) > per_op else ""
        lines.append(f"- `{op}`: {len(nodeids)} items: {shown}{more}")
    return [*lines, ""]


def render_markdown(data: dict[str, Any], max_failures: int = 25) -> str:
    s = data["summary"]
    mode = " (fake)" if data.get("fake") else ""
    lines = [
        f"## Autocast conformance: {data.get('device')}{mode}, torch {data.get('torch')}",
        "",
        *[line for note in notes(data) for line in (f"> **{note}**", "")],
        f"**{verdict(data)[1]}**",
        "",
        *([f"Judged: {judged.line(data)}", ""] if judged.line(data) else []),
        f"**{s.get('passed', 0)} passed**, {s.get('failed', 0)} failed, {s.get('error', 0)} errors, "
        f"{s.get('xfailed', 0)} expected failures, {s.get('xpassed', 0)} unexpected passes, "
        f"{s.get('skipped', 0)} skipped ({s.get('not_applicable', 0)} not applicable) — "
        f"{rate_note(data)}",
        "",
        f"Autocast dtypes {', '.join(data.get('amp_dtypes') or []) or '—'}, numerics "
        f"{data.get('numerics')}, Python {data.get('python')}.",
        "",
        *tables.md_table("check family", tables.family_rows(data)),
        *([tables.timing(data), ""] if tables.timing(data) else []),
        *tables.md_family_skips(data),
        *causes.markdown(data),
        *([causes.limits_line(data), ""] if causes.limits_line(data) else []),
        *_md_excused(data),
        *_md_lost(data),
        *[line for tier in registry.tiers() for line in tier.markdown(data)],
        *tables.md_table("op-list category", data.get("categories") or {}),
        *_md_list("Failures", [r for r in data["results"] if state_of(r) in _PROBLEMS], max_failures),
        *_md_list("Expected failures", expected_failures(data), max_failures),
    ]
    defects = _defect_lines(data)
    if defects:
        lines += [f"### Reference defects: PyTorch's own ({len(defects)})", ""]
        lines += [f"- `{d['id']}` ({', '.join(d['links'])}): {data.get('device')} {verdict}"
                  for d, verdict in defects]
        lines.append("")
    return "\n".join(lines)
