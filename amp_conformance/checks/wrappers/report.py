"""The report's "Wrappers" section: per declared wrapper (``--wrapper``, the wrappers hook),
its library and version, its shape, the devices and amp dtypes it was tried on, its checks
passed, failed and skipped, and its departures grouped by cause (the promise broken, with
the items that broke it). Absent from a run without the wrapper tier."""

from __future__ import annotations

import html
from typing import Any

from amp_conformance.core.errors import headline

_FAILED = ("failed", "error")


#: the declared shapes, as the section names them
SHAPES = {"region": "region factory", "runner": "region runner", "forward": "forward decorator",
          "island": "float32 island", "swap": "region swap", "predicate": "predicate",
          "scaler": "scaler"}


def rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Wrapper name -> library, version, shape, where it was tried (devices and amp
    dtypes), counts, and its departures grouped by cause (the promise broken -> items)."""
    found: dict[str, dict[str, Any]] = {}
    for r in data.get("results") or []:
        w = r.get("wrapper")
        if not w:
            continue
        row = found.setdefault(w["name"], {"library": w.get("library") or "—",
                                           "version": w.get("version") or "—",
                                           "kind": w.get("kind"), "passed": 0, "failed": 0,
                                           "skipped": 0, "tried": {}, "causes": {}})
        outcome = r.get("outcome")
        key = "failed" if outcome in _FAILED else outcome if outcome in row else None
        if key:
            row[key] += 1
        if outcome != "skipped" and w.get("device"):
            device = w["device"] + (" (fake)" if w.get("fake") else "")
            dtypes = row["tried"].setdefault(device, [])
            if r.get("amp_dtype") and r["amp_dtype"] not in dtypes:
                dtypes.append(r["amp_dtype"])
        if outcome in _FAILED:
            per_dtype = w.get("kind") in ("island", "swap", "predicate")
            item = "-".join(p for p in (r.get("amp_dtype") if per_dtype else
                                        w.get("precision"), w.get("check")) if p)
            row["causes"].setdefault(_promise(r.get("message")), []).append(item)
    return found


def _promise(message: str | None) -> str:
    line = headline(message)
    return line.split("broken promise: ", 1)[1] if "broken promise: " in line else line


def _tried(row: dict[str, Any]) -> str:
    return "; ".join(f"{d} {', '.join(sorted(t))}".strip() for d, t in row["tried"].items()) or "—"


def _shape(row: dict[str, Any]) -> str:
    return SHAPES.get(row["kind"] or "", row["kind"] or "")


def html_section(data: dict[str, Any]) -> str:
    table = rows(data)
    if not table:
        return ""
    e = html.escape
    body = "".join(
        f"<tr><td>{e(name)}</td><td>{e(_shape(row))}</td><td>{e(row['library'])} "
        f"{e(row['version'])}</td><td>{e(_tried(row))}</td><td class=\"num\">{row['passed']}</td>"
        f"<td class=\"{'num fail' if row['failed'] else 'num'}\">{row['failed']}</td>"
        f"<td class=\"num\">{row['skipped']}</td><td>"
        + "<br>".join(f"{e(cause)}: " + ", ".join(f"<code>{e(i)}</code>" for i in items)
                      for cause, items in row["causes"].items())
        + "</td></tr>" for name, row in table.items())
    return ('<h2 id="wrappers">Wrappers</h2>\n<table><thead><tr><th>wrapper</th><th>shape</th>'
            "<th>library</th><th>tried on</th><th>passed</th><th>failed</th><th>skipped</th>"
            f"<th>departures, by cause</th></tr></thead><tbody>{body}</tbody></table>")


def markdown_section(data: dict[str, Any]) -> list[str]:
    table = rows(data)
    if not table:
        return []
    lines = ["### Wrappers", "", "| wrapper | shape | library | tried on | passed | failed | "
             "skipped | departures, by cause |", "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for name, row in table.items():
        causes = "; ".join(f"{cause}: " + ", ".join(f"`{i}`" for i in items)
                           for cause, items in row["causes"].items()) or "—"
        lines.append(f"| `{name}` | {_shape(row)} | {row['library']} {row['version']} | "
                     f"{_tried(row)} | {row['passed']} | {row['failed']} | {row['skipped']} | "
                     f"{causes} |")
    return [*lines, ""]
