"""``python -m amp_conformance atlas --html PAGE``: atlases as one page people look at.

One row per op, one column per device and torch release of the atlases given (each a JSON
of ``atlas --json``: one per release, one from a vendor's real device), each cell coloured
by the kind of policy it shows, its whole text on hover. The **differs** view keeps the
rows where two chosen columns disagree, those two columns side by side (the autocast dtype
of each column read as "amp", so cpu's bfloat16 and cuda's float16 lower precision agree);
filters by op name and kind; a click on a cell shows the op-list entries of that device
naming the op and the command that reproduces the cell. The page is self-contained (its
data, style and script inline): it opens from a file, with no network.

The view is also set from the address's fragment (``#differs=A,B&op=conv&kind=lower``,
columns by index), so a link can show a comparison.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amp_conformance.schema import oplist

#: kind -> (label, background, text colour), in legend order
KINDS: dict[str, tuple[str, str, str]] = {
    "lower": ("lower precision", "#cfe2ff", "#084298"),
    "fp32": ("float32", "#ffe5b4", "#8a4b00"),
    "promote": ("widest input type", "#e8dcff", "#4b2a85"),
    "banned": ("banned", "#3b0a0a", "#ffd7d5"),
    "alone": ("left alone", "#eef1f4", "#4a535c"),
    "error": ("error", "#ffd7d5", "#86181d"),
    "not run": ("not run", "#ffffff", "#8c959f"),
}


def kind_of(cell: str) -> str:
    """The policy kind a cell shows (``atlas.cell``'s words)."""
    head = cell.split(" ", 1)[0].rstrip(":")
    if head == "via":  # a composite: the policies its decomposition reaches
        head = cell.split(" ", 2)[1].split("+")[0]
    if head in ("lower", "promote", "banned", "alone"):
        return head
    if head.startswith("fp32"):
        return "fp32"
    if head in ("error", "departs", "crashed"):
        return "error"
    return "not run"


def _release(version: str) -> str:
    return version.split("+")[0]


def columns(atlases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One column per device of each atlas, in the order given."""
    out = []
    for a, atlas in enumerate(atlases):
        for device, meta in atlas["devices"].items():
            fake = " fake" if meta.get("fake") else ""
            out.append({"atlas": a, "device": device, "torch": _release(atlas["torch"]),
                        "amp": meta.get("amp_dtype", ""),
                        "label": f"{device}{fake} · torch {_release(atlas['torch'])}"})
    return out


def _entries(device: str, page_dir: Path) -> dict[str, list[dict[str, str]]]:
    """The project's op-list entries of ``device`` by op name, each with a link to its
    file from the page (none for a device this project has no lists of)."""
    if device not in oplist.builtin_devices():
        return {}
    found: dict[str, list[dict[str, str]]] = {}
    for e in oplist.load(device).entries:
        path = Path(e.path)
        found.setdefault(e.op, []).append({
            "id": e.id, "category": e.category,
            "file": f"oplists/{path.name}",
            "href": os.path.relpath(path, page_dir).replace(os.sep, "/")})
    return found


def data(atlases: Sequence[dict[str, Any]], page_dir: Path) -> dict[str, Any]:
    """What the page's script renders: columns, rows (op, cells, kinds) and entries."""
    cols = columns(atlases)
    ops = list(dict.fromkeys(op for atlas in atlases for op in atlas["ops"]))
    rows = []
    for op in ops:
        cells = [atlases[c["atlas"]]["ops"].get(op, {}).get(c["device"]) for c in cols]
        rows.append({"op": op, "cells": [c if c is not None else "—" for c in cells],
                     "kinds": [kind_of(c) if c is not None else "not run" for c in cells]})
    names = dict.fromkeys(op.rpartition(".")[2] for op in ops)  # each op as op lists name it
    entries = {d: _entries(d, page_dir) for d in dict.fromkeys(c["device"] for c in cols)}
    return {"columns": cols, "rows": rows, "kinds": {k: v[0] for k, v in KINDS.items()},
            "entries": {d: {n: e[n] for n in names if n in e}
                        for d, e in entries.items()}}


_STYLE = """
body { font: 13px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0;
  color: #1f2328; }
header { background: #24292f; color: #fff; padding: 14px 24px; }
header h1 { margin: 0 0 4px; font-size: 20px; }
header p { margin: 0; color: #c9d1d9; }
form { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; padding: 10px 24px;
  border-bottom: 1px solid #d0d7de; position: sticky; top: 0; background: #fff; z-index: 2; }
.legend span { display: inline-block; padding: 1px 6px; margin-right: 4px; border-radius: 3px; }
main { padding: 8px 24px 32px; }
table { border-collapse: collapse; }
th, td { border: 1px solid #d0d7de; padding: 2px 6px; white-space: nowrap; }
th { background: #f6f8fa; position: sticky; top: 47px; }
td.cell { cursor: pointer; max-width: 220px; overflow: hidden; text-overflow: ellipsis; }
td.op { font-family: ui-monospace, monospace; }
#count { color: #656d76; }
#detail { position: fixed; right: 16px; bottom: 16px; width: 420px; background: #fff;
  border: 1px solid #d0d7de; border-radius: 6px; padding: 10px 14px; display: none;
  box-shadow: 0 4px 14px rgba(0,0,0,.15); white-space: normal; }
#detail code { background: #f6f8fa; padding: 1px 4px; }
"""

_SCRIPT = r"""
const D = JSON.parse(document.getElementById('atlas-data').textContent);
const $ = (id) => document.getElementById(id);
const norm = (cell, col) => col.amp ? cell.split(col.amp).join('amp') : cell;
function options(select, chosen) {
  D.columns.forEach((c, i) => {
    const o = document.createElement('option');
    o.value = i; o.textContent = c.label; o.selected = i === chosen; select.appendChild(o);
  });
}
function render() {
  const text = $('op').value.toLowerCase(), kind = $('kind').value;
  const differs = $('differs').checked, a = +$('a').value, b = +$('b').value;
  const body = document.querySelector('tbody'), head = document.querySelector('thead tr');
  const cols = differs ? [a, b] : D.columns.map((_, i) => i);
  head.textContent = '';
  ['op', ...cols.map((i) => D.columns[i].label)].forEach((label) => {
    const th = document.createElement('th'); th.textContent = label; head.appendChild(th); });
  body.textContent = '';
  let shown = 0;
  D.rows.forEach((row, r) => {
    if (text && !row.op.toLowerCase().includes(text)) return;
    if (kind && !row.kinds.includes(kind)) return;
    if (differs && norm(row.cells[a], D.columns[a]) === norm(row.cells[b], D.columns[b])) return;
    const tr = document.createElement('tr');
    tr.dataset.op = row.op;
    const name = document.createElement('td');
    name.className = 'op'; name.textContent = row.op; tr.appendChild(name);
    cols.forEach((i) => {
      const td = document.createElement('td'), cell = row.cells[i];
      td.className = 'cell k-' + row.kinds[i].replace(' ', '-');
      td.textContent = cell; td.title = D.columns[i].label + ': ' + cell;
      td.onclick = () => detail(r, i);
      tr.appendChild(td);
    });
    body.appendChild(tr); shown++;
  });
  $('count').textContent = shown + ' of ' + D.rows.length + ' ops shown';
  document.body.dataset.shown = shown;
}
function detail(r, i) {
  const row = D.rows[r], col = D.columns[i], box = $('detail');
  const name = row.op.split('.').pop();
  const entries = (D.entries[col.device] || {})[name] || [];
  box.textContent = '';
  const add = (tag, text) => { const e = document.createElement(tag); e.textContent = text;
    box.appendChild(e); return e; };
  add('b', row.op + ' on ' + col.label);
  add('p', row.cells[i] + ' (' + D.kinds[row.kinds[i]] + ')');
  if (entries.length) {
    const p = add('p', 'op list: ');
    entries.forEach((e) => { const l = document.createElement('a'); l.href = e.href;
      l.textContent = e.file + ' [' + e.id + '] ' + e.category + ' '; p.appendChild(l); });
  } else add('p', 'no entry of this project\'s op lists names it on ' + col.device);
  add('p', 'reproduce (torch ' + col.torch + '):');
  add('code', 'python -m amp_conformance atlas --devices ' + col.device + ' --ops ' + row.op);
  box.style.display = 'block';
}
function fromHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.has('op')) $('op').value = h.get('op');
  if (h.has('kind')) $('kind').value = h.get('kind');
  if (h.has('differs')) {
    const [a, b] = h.get('differs').split(',').map(Number);
    $('a').value = a; $('b').value = b; $('differs').checked = true;
  }
}
options($('a'), 0); options($('b'), Math.min(1, D.columns.length - 1));
Object.entries(D.kinds).forEach(([k, label]) => {
  const o = document.createElement('option'); o.value = k; o.textContent = label;
  $('kind').appendChild(o);
});
fromHash();
['op', 'kind', 'differs', 'a', 'b'].forEach((id) => $(id).addEventListener('input', render));
window.addEventListener('hashchange', () => { fromHash(); render(); });
render();
"""


def render(atlases: Sequence[dict[str, Any]], page: Path,
           sources: Sequence[str] = ()) -> str:
    """The page for ``atlases`` written at ``page`` (links to op lists are relative to it);
    ``sources`` names where each atlas came from."""
    payload = json.dumps(data(atlases, page.resolve().parent), separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # no "</script>" inside the data
    kinds_css = "\n".join(f".k-{k.replace(' ', '-')} {{ background: {bg}; color: {fg}; }}"
                          for k, (_, bg, fg) in KINDS.items())
    legend = "".join(f'<span class="k-{k.replace(" ", "-")}">{html.escape(label)}</span>'
                     for k, (label, _, _) in KINDS.items())
    made = ", ".join(html.escape(s) for s in sources) or "atlas JSONs"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>The autocast atlas</title>
<style>{_STYLE}
{kinds_css}</style></head>
<body>
<header><h1>The autocast atlas</h1>
<p>What autocast does to every op of op_db, per device and torch release; from {made}.
Hover a cell for its words, click it for its op-list entries and how to reproduce it.</p></header>
<form onsubmit="return false">
<label>op <input id="op" type="search" placeholder="name contains"></label>
<label>kind <select id="kind"><option value="">any</option></select></label>
<label><input id="differs" type="checkbox"> only where</label>
<select id="a"></select><span>differs from</span><select id="b"></select>
<span id="count"></span>
<span class="legend">{legend}</span>
</form>
<main><table><thead><tr></tr></thead><tbody></tbody></table></main>
<div id="detail"></div>
<script type="application/json" id="atlas-data">{payload}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def write(atlases: Sequence[dict[str, Any]], page: str | Path, sources: Sequence[str] = ()) -> int:
    """Write the page; its size in bytes."""
    path = Path(page)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render(atlases, path, sources)
    path.write_text(text, encoding="utf-8")
    return len(text.encode("utf-8"))
