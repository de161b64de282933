"""``--conformance-report PATH.json``: the run as data (docs/report-schema.md), plus a
self-contained HTML page (PATH.html) and a Markdown summary (PATH.md) beside it.

Reports are gathered where the session runs its loop — the only process under
pytest-xdist that sees every report is the controller, which collects nothing itself. So
what an item is (check, amp dtype, op-list category, entry, op) travels with its reports:
each item carries it as a user property (``amp_item``) set at collection on whichever
process collects, and pytest-xdist ships ``user_properties`` with every report. Outcomes
are classified by pytest's own ``pytest_report_teststatus``, so the summary counts equal
the ones pytest prints.
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from amp_conformance.core import devices
from amp_conformance.plugin.report.render import render_html, render_markdown
from amp_conformance.plugin.session_settings import settings
from amp_conformance.plugin.vendor import check_of, declarations

SCHEMA = "amp-conformance-report/1"
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")
NOT_APPLICABLE = "not applicable"
ITEM_PROPERTY = "amp_item"
OBSERVED_PROPERTY = "amp_observed"
#: an item's outcome when its phases differ: the most telling one wins
_RANK = {"": 0, "passed": 1, "skipped": 2, "xfailed": 3, "xpassed": 4, "error": 5, "failed": 6}
_MAX_MESSAGE = 4000


def report_paths(path: str | Path) -> tuple[Path, Path, Path]:
    """The JSON, HTML and Markdown files of ``--conformance-report PATH.json``."""
    json_path = Path(path)
    return json_path, json_path.with_suffix(".html"), json_path.with_suffix(".md")


def _requested(config: pytest.Config) -> str | None:
    return config.getoption("amp_report", None)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    path = _requested(config)
    if not path or config.option.help or config.option.version:
        return None
    target = Path(path)
    if target.suffix != ".json":
        raise pytest.UsageError(
            f"amp-conformance: --conformance-report {path}: expected a path ending in .json "
            "(the HTML and Markdown files are written beside it)")
    if target.is_dir():
        raise pytest.UsageError(f"amp-conformance: --conformance-report {path} is a directory")
    if target.parent.exists() and not target.parent.is_dir():
        raise pytest.UsageError(
            f"amp-conformance: --conformance-report {path}: {target.parent} is not a directory")
    return None


def pytest_configure(config: pytest.Config) -> None:
    path = _requested(config)
    if path and not hasattr(config, "workerinput"):  # not on an xdist worker
        config.pluginmanager.register(ReportWriter(config, Path(path)), "amp-conformance-report")


def item_info(item: pytest.Item) -> dict[str, Any]:
    """What the report needs to know of an item, beyond its outcome."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    info: dict[str, Any] = {"check": check_of(item), "amp_dtype": None, "category": None,
                            "entry": None, "op": None}
    case = params.get("amp_case")
    if case is not None:
        info.update(amp_dtype=devices.dtype_name(case.amp_dtype), category=case.entry.category,
                    entry=case.entry.id, op=case.entry.qualname)
    elif isinstance(params.get("amp_dtype"), torch.dtype):
        info["amp_dtype"] = devices.dtype_name(params["amp_dtype"])
    return info


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _requested(config):
        for item in items:
            item.user_properties.append((ITEM_PROPERTY, item_info(item)))


# -- gathering -----------------------------------------------------------------------


def message_of(report: Any, category: str) -> str | None:
    """The failure message, skip reason or xfail reason of one report."""
    longrepr = report.longrepr
    if category == "skipped" and isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    crash = getattr(longrepr, "reprcrash", None)
    failure = crash.message if crash is not None else (str(longrepr) if longrepr else None)
    if category in ("xfailed", "xpassed"):
        reason = getattr(report, "wasxfail", "") or ""
        if category == "xfailed" and failure:
            return f"{reason}\n{failure}" if reason else failure
        return reason or None
    if category in ("failed", "error"):
        return failure
    return None


@dataclass
class ItemRecord:
    nodeid: str
    outcome: str = ""
    message: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    observed: Any = None

    def add(self, report: Any, category: str) -> None:
        props = dict(getattr(report, "user_properties", ()) or ())
        if ITEM_PROPERTY in props:
            self.info = dict(props[ITEM_PROPERTY])
        if OBSERVED_PROPERTY in props:
            self.observed = props[OBSERVED_PROPERTY]
        if _RANK.get(category, 0) > _RANK.get(self.outcome, 0):
            self.outcome = category
            self.message = message_of(report, category)

    def as_json(self) -> dict[str, Any]:
        test, param = split_nodeid(self.nodeid)
        message = self.message
        if message is not None and len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + "\n… (truncated)"
        info = self.info
        return {
            "nodeid": self.nodeid,
            "test": test,
            "check": info.get("check"),
            "param": param,
            "amp_dtype": info.get("amp_dtype"),
            "category": info.get("category"),
            "entry": info.get("entry"),
            "op": info.get("op"),
            "outcome": self.outcome or "passed",
            "message": message,
            "observed": self.observed if self.observed not in ({}, None) else None,
        }


def split_nodeid(nodeid: str) -> tuple[str | None, str | None]:
    """(test function name, parametrization id) of a node id."""
    if "::" not in nodeid:
        return None, None
    name = nodeid.rsplit("::", 1)[1]
    if "[" in name and name.endswith("]"):
        test, param = name.split("[", 1)
        return test, param[:-1]
    return name, None


def is_not_applicable(message: str | None) -> bool:
    return bool(message) and message.startswith(NOT_APPLICABLE)


class ReportWriter:
    """Registered on the process that runs the session; writes the files at its end."""

    def __init__(self, config: pytest.Config, path: Path):
        self.config = config
        self.path = path
        self.records: dict[str, ItemRecord] = {}
        self.counts: Counter[str] = Counter()
        self.written: list[Path] = []

    def _category(self, report: Any) -> str:
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        return status[0] if status else ""

    def pytest_runtest_logreport(self, report: Any) -> None:
        category = self._category(report)
        if category in OUTCOMES:
            self.counts[category] += 1
            if category == "skipped" and is_not_applicable(message_of(report, category)):
                self.counts["not_applicable"] += 1
        self.records.setdefault(report.nodeid, ItemRecord(report.nodeid)).add(report, category)

    def pytest_collectreport(self, report: Any) -> None:
        if report.passed:
            return
        category = "error" if report.failed else "skipped"
        record = self.records.setdefault(report.nodeid, ItemRecord(report.nodeid))
        if not record.outcome:
            self.counts[category] += 1
            if category == "skipped" and is_not_applicable(message_of(report, category)):
                self.counts["not_applicable"] += 1
        record.add(report, category)

    # -- building --------------------------------------------------------------------

    def build(self) -> dict[str, Any]:
        s = settings(self.config)
        decl = declarations(self.config)
        results = [r.as_json() for _, r in sorted(self.records.items())]
        summary = {k: self.counts.get(k, 0) for k in (*OUTCOMES, "not_applicable")}
        return {
            "schema": SCHEMA,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": s.device,
            "fake": s.fake,
            "amp_dtypes": [devices.dtype_name(d) for d in s.amp_dtypes],
            "numerics": s.numerics,
            "options": {
                "oplists": list(s.oplists),
                "capabilities": decl.capabilities.as_json(),
                "xfail_files": list(decl.xfail_files),
                "backend_modules": list(self.config.getoption("amp_backend_modules") or []),
                "keyword": self.config.option.keyword or None,
                "markexpr": self.config.option.markexpr or None,
            },
            "summary": summary,
            "categories": categories(results),
            "results": results,
        }

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        data = self.build()
        json_path, html_path, md_path = report_paths(self.path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        html_path.write_text(render_html(data), encoding="utf-8")
        md_path.write_text(render_markdown(data), encoding="utf-8")
        self.written = [json_path, html_path, md_path]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            terminalreporter.write_line(
                "amp-conformance report: " + ", ".join(str(p) for p in self.written))


def categories(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per op-list category: item outcomes, not-applicable skips and the pass rate."""
    table: dict[str, Counter[str]] = {}
    for r in results:
        if r["category"] is None:
            continue
        counts = table.setdefault(r["category"], Counter())
        counts[r["outcome"]] += 1
        if r["outcome"] == "skipped" and is_not_applicable(r["message"]):
            counts["not_applicable"] += 1
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(table):
        counts = table[name]
        row: dict[str, Any] = {k: counts.get(k, 0) for k in (*OUTCOMES, "not_applicable")}
        ran = row["passed"] + row["failed"] + row["error"] + row["xpassed"]
        row["pass_rate"] = round(row["passed"] / ran, 4) if ran else None
        out[name] = row
    return out
