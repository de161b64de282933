"""The report's "Wrappers" section: per declared wrapper (``--wrapper``, the wrappers hook),
its library and version, its checks passed, failed and skipped, and each failure's
headline (the promise it broke). Absent from a run without the wrapper tier."""

from __future__ import annotations

import html
from typing import Any

from amp_conformance.core.errors import headline

_FAILED = ("failed", "error")


def rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Wrapper name -> library, version, kind, counts and failure headlines."""
    found: dict[str, dict[str, Any]] = {}
    for r in data.get("results") or []:
        w = r.get("wrapper")
        if not w:
            continue
        row = found.setdefault(w["name"], {"library": w.get("library") or "—",
                                           "version": w.get("version") or "—",
                                           "kind": w.get("kind"), "passed": 0, "failed": 0,
                                           "skipped": 0, "failures": []})
        outcome = r.get("outcome")
        key = "failed" if outcome in _FAILED else outcome if outcome in row else None
        if key:
            row[key] += 1
        if outcome in _FAILED:
            item = "-".join(p for p in (w.get("precision"), w.get("check")) if p)
            row["failures"].append((item, _promise(r.get("message"))))
    return found


def _promise(message: str | None) -> str:
    line = headline(message)
    return line.split("broken promise: ", 1)[1] if "broken promise: " in line else line


def html_section(data: dict[str, Any]) -> str:
    table = rows(data)
    if not table:
        return ""
    e = html.escape
    body = "".join(
        f"<tr><td>{e(name)}</td><td>{e(row['kind'] or '')}</td><td>{e(row['library'])} "
        f"{e(row['version'])}</td><td class=\"num\">{row['passed']}</td>"
        f"<td class=\"{'num fail' if row['failed'] else 'num'}\">{row['failed']}</td>"
        f"<td class=\"num\">{row['skipped']}</td><td>"
        + "<br>".join(f"<code>{e(item)}</code>: {e(text)}" for item, text in row["failures"])
        + "</td></tr>" for name, row in table.items())
    return ('<h2 id="wrappers">Wrappers</h2>\n<table><thead><tr><th>wrapper</th><th>kind</th>'
            "<th>library</th><th>passed</th><th>failed</th><th>skipped</th><th>broken promises"
            f"</th></tr></thead><tbody>{body}</tbody></table>")


def markdown_section(data: dict[str, Any]) -> list[str]:
    table = rows(data)
    if not table:
        return []
    lines = ["### Wrappers", "", "| wrapper | library | passed | failed | skipped | broken "
             "promises |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for name, row in table.items():
        broken = "; ".join(f"`{item}`: {text}" for item, text in row["failures"]) or "—"
        lines.append(f"| `{name}` ({row['kind']}) | {row['library']} {row['version']} | "
                     f"{row['passed']} | {row['failed']} | {row['skipped']} | {broken} |")
    return [*lines, ""]
