"""The report's files: ``PATH.json`` and, beside it, ``PATH.html`` and ``PATH.md``.

One place says where they are and writes them, for the plugin (at a session's start and
end), for ``python -m amp_conformance run`` (a report rebuilt after a crash) and for the
path check made before a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amp_conformance.plugin.report.render import render_html, render_markdown


def report_paths(path: str | Path) -> tuple[Path, Path, Path]:
    """The JSON, HTML and Markdown files of ``--conformance-report PATH.json``."""
    json_path = Path(path)
    return json_path, json_path.with_suffix(".html"), json_path.with_suffix(".md")


def write_report(path: str | Path, data: dict[str, Any]) -> list[Path]:
    """Write the three files of the report ``data``; the paths written."""
    json_path, html_path, md_path = report_paths(path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    html_path.write_text(render_html(data), encoding="utf-8")
    md_path.write_text(render_markdown(data), encoding="utf-8")
    return [json_path, html_path, md_path]
