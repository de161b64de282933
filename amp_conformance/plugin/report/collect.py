"""The run's one tally, and ``--conformance-report PATH.json``: the run as data
(docs/report-schema.md), plus a self-contained HTML page (PATH.html) and a Markdown
summary (PATH.md) beside it.

Reports are gathered where the session runs its loop — the only process under
pytest-xdist that sees every report is the controller, which collects nothing itself. So
what an item is (check, amp dtype, op-list category, entry, op) travels with its reports:
each item carries it as a user property (``amp_item``) set at collection on whichever
process collects, and pytest-xdist ships ``user_properties`` with every report. Outcomes
are classified by pytest's own ``pytest_report_teststatus``, so the summary counts equal
the ones pytest prints.

The :class:`Collector` there feeds every conformance item's events to one
:class:`~amp_conformance.plugin.report.journal.Accumulator`, report or not: the exit status
(:mod:`amp_conformance.plugin.verdict`), the failures by cause, the quarantine's and the
lost device's summary lines read it (:func:`tally`), and the report is built from it.
"""

from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from amp_conformance.core import devices
from amp_conformance.plugin.items import (
    DEFECT_PROPERTY,
    EXCUSE_PROPERTY,
    ITEM_PROPERTY,
    LOST_PROPERTY,
    OBSERVED_PROPERTY,
    OPINFO_PROPERTY,
    check_of,
    info_of,
    is_conformance,
)
from amp_conformance.plugin.report.files import report_paths, write_report
from amp_conformance.plugin.report.journal import (
    Accumulator,
    Journal,
    build_report,
    journal_path,
)
from amp_conformance.plugin.report.judged import judged
from amp_conformance.plugin.report.paths import validate_report_path
from amp_conformance.plugin.session_settings import settings
from amp_conformance.plugin.vendor import declarations
from amp_conformance.plugin.xdist_roles import is_worker

#: an xdist worker's count of deselected items, in its ``workeroutput``
WORKER_DESELECTED = "amp_deselected"


def _requested(config: pytest.Config) -> str | None:
    return config.getoption("amp_report", None)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    path = _requested(config)
    if not path or config.option.help or config.option.version:
        return None
    validate_report_path(Path(path))  # before the run: an unwritable path fails it at once
    return None


COLLECTOR = "amp-conformance-collector"
#: how the session ended beyond its exit status (interrupted by what, the setup errors), as
#: plugin.verdict decided it before the report's last event
END = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    if not is_worker(config):  # the process the reports arrive at
        path = _requested(config)
        config.pluginmanager.register(Collector(config, Path(path) if path else None), COLLECTOR)


def tally(config: pytest.Config) -> Accumulator | None:
    """The run's tally: every conformance item's outcome as the report counts it (None on
    an xdist worker, which only sends its reports on)."""
    collector = config.pluginmanager.get_plugin(COLLECTOR)
    return collector.acc if isinstance(collector, Collector) else None


def package_nodeid(item: pytest.Item) -> str:
    """The item's id relative to the installed package (``amp_conformance/suite/test_x.py::
    test_y[param]``), the same wherever the venv or the rootdir is; pytest's own node id for
    items outside a package."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    if not module or "." not in module:
        return item.nodeid
    return module.replace(".", "/") + ".py::" + item.nodeid.split("::", 1)[1]


def item_info(item: pytest.Item) -> dict[str, Any]:
    """What the report needs to know of an item, beyond its outcome."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    info: dict[str, Any] = {"check": check_of(item), "amp_dtype": None, "category": None,
                            "entry": None, "op": None, "nodeid": package_nodeid(item)}
    case = params.get("amp_case")
    if case is not None:
        info.update(amp_dtype=devices.dtype_name(case.amp_dtype), category=case.entry.category,
                    entry=case.entry.id, op=case.entry.qualname)
    elif isinstance(params.get("amp_dtype"), torch.dtype):
        info["amp_dtype"] = devices.dtype_name(params["amp_dtype"])
    opinfo = params.get("opinfo_case")
    if opinfo is not None:  # the OpInfo tier (checks/opinfo): the report's operator surface
        info.update(amp_dtype=devices.dtype_name(opinfo.amp_dtype), op=opinfo.ref.id)
    module = params.get("module_case") or params.get("module_db_case")
    if module is not None:  # the modules family (checks/modules): a module, not an op
        info.update(amp_dtype=devices.dtype_name(module.amp_dtype), entry=module.name)
    wrapper = params.get("amp_wrapper_case")
    if wrapper is not None:  # the wrapper tier (checks/wrappers): the report's Wrappers section
        w = wrapper.wrapper
        info["wrapper"] = {"name": w.name, "kind": wrapper.kind, "library": w.library,
                           "version": w.version, "check": wrapper.check,
                           "precision": wrapper.precision, "device": wrapper.device,
                           "fake": wrapper.fake}
        if wrapper.precision is not None or wrapper.kind != "region":
            info["amp_dtype"] = devices.dtype_name(wrapper.amp_dtype)
    return info


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Items say what they are: every item for the report, every conformance item for
    plugin.outcomes (failures by cause, opt-in tiers) with or without one."""
    every = bool(_requested(config))
    for item in items:
        if every or is_conformance(item):
            item.user_properties.append((ITEM_PROPERTY, item_info(item)))


@pytest.hookimpl(trylast=True)
def pytest_deselected(items: list[pytest.Item]) -> None:
    """On an xdist worker: count the items ``-k``/``-m``/``--amp-resume`` deselected, for the
    controller, which never sees a worker's deselection (:meth:`Collector.pytest_testnodedown`)."""
    config = items[0].config if items else None
    output = getattr(config, "workeroutput", None)
    if output is not None:
        output[WORKER_DESELECTED] = output.get(WORKER_DESELECTED, 0) + len(items)


# -- gathering -----------------------------------------------------------------------


def message_of(report: Any, category: str) -> str | None:
    """The failure message, skip reason or xfail reason of one report."""
    longrepr = report.longrepr
    if category in ("skipped", "quarantined") and isinstance(longrepr, tuple) and len(longrepr) == 3:
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


class Collector:
    """Registered on the process the reports arrive at (the xdist controller included):
    the run's tally, and with a report path its journal and files.

    Every event goes to the journal first, then into the live accumulator; the files are
    written at the session's start (status "running": a crash leaves that, never an older
    run's report) and at its end (completed, or interrupted and by what). Without a report
    only the conformance items' reports are tallied.
    """

    def __init__(self, config: pytest.Config, path: Path | None):
        self.config = config
        self.path = path
        self.acc = Accumulator()
        self.journal: Journal | None = None
        self.written: list[Path] = []
        self.worker_deselected = False

    def _event(self, event: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append(event)
        self.acc.feed(event)

    def _category(self, report: Any) -> str:
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        return status[0] if status else ""

    def _session_event(self) -> dict[str, Any]:
        s = settings(self.config)
        decl = declarations(self.config)
        modules = list(self.config.getoption("amp_backend_modules") or [])
        return {
            "event": "session",
            "time": time.time(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": s.device,
            "fake": s.fake,
            "amp_dtypes": [devices.dtype_name(d) for d in s.amp_dtypes],
            "numerics": s.numerics,
            "judged": judged(s.device, s.fake, modules),
            "options": {
                "oplists": list(s.oplists),
                "capabilities": decl.capabilities.as_json(),
                "xfail_files": list(decl.xfail_files),
                "backend_modules": modules,
                "amp_dtypes_requested": list(self.config.getoption("amp_dtype") or []) or None,
                "keyword": self.config.option.keyword or None,
                "markexpr": self.config.option.markexpr or None,
            },
        }

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.path is None:
            return
        for stale in report_paths(self.path):
            stale.unlink(missing_ok=True)
        self.journal = Journal(journal_path(self.path))
        self._event(self._session_event())
        self._write(build_report(self.acc))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self._event({"event": "collected", "count": len(session.items),
                         "items": [[i.nodeid, check_of(i)] for i in session.items]})

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.acc.collected is None:
            self._event({"event": "collected", "count": len(ids),
                         "items": [[nodeid, None] for nodeid in ids]})

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self._event({"event": "deselected", "count": len(items)})

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Every xdist worker deselects the same items: the first to end says how many."""
        count = getattr(node, "workeroutput", {}).get(WORKER_DESELECTED)
        if count and not self.worker_deselected:
            self.worker_deselected = True
            self._event({"event": "deselected", "count": count})

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._event({"event": "start", "nodeid": nodeid})

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self._event({"event": "finish", "nodeid": nodeid})

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.path is not None or info_of(report) is not None:
            self._event(self._report_event(report, self._category(report)))

    def pytest_collectreport(self, report: Any) -> None:
        if report.passed or self.path is None:
            return
        category = "error" if report.failed else "skipped"
        if report.nodeid in self.acc.records:
            return
        self._event({**self._report_event(report, category), "collection": True})

    def _report_event(self, report: Any, category: str) -> dict[str, Any]:
        props = dict(getattr(report, "user_properties", ()) or ())
        event = {"event": "report", "nodeid": report.nodeid, "when": getattr(report, "when", None),
                 "duration": round(getattr(report, "duration", 0.0) or 0.0, 6),
                 "category": category, "message": message_of(report, category),
                 "item": props.get(ITEM_PROPERTY), "observed": props.get(OBSERVED_PROPERTY),
                 "defect": props.get(DEFECT_PROPERTY), "opinfo": props.get(OPINFO_PROPERTY),
                 "excuse": props.get(EXCUSE_PROPERTY)}
        if props.get(LOST_PROPERTY):  # the item during which the device was lost (health.py)
            event["device_lost"] = props[LOST_PROPERTY]
        return event

    # -- the end ---------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # session.exitstatus: what the run returns, as plugin.verdict decided it
        end = self.config.stash.get(END, {})
        self._event({"event": "end", "time": time.time(), "exitstatus": int(session.exitstatus),
                     "interrupted_by": end.get("interrupted_by"),
                     "setup_errors": end.get("setup_errors", [])})
        if self.journal is not None:
            self.journal.close()
        if self.path is not None:
            self._write(build_report(self.acc))

    def _write(self, data: dict[str, Any]) -> None:
        assert self.path is not None
        self.written = write_report(self.path, data)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            terminalreporter.write_line(
                "amp-conformance report: " + ", ".join(str(p) for p in self.written))
