"""Quarantine by op: an op that lost the device costs one item, not one process per item.

When the health check (:mod:`amp_conformance.plugin.health`) finds the device lost and its
probe blames an op (``… in aten::baddbmm``), the op is written to the run's quarantine file
(``--amp-quarantine-file``: ``python -m amp_conformance run`` passes one to every process it
starts; an xdist controller makes one for its workers). Wherever items run, the ops of that
file are fenced around each item (:mod:`amp_conformance.core.quarantine`): an item that calls
one stops before it reaches the device and is reported **not run: aten::baddbmm loses the
device** (``Q``, "quarantined"), never passed or failed; every other item runs. A run with
quarantined items is no full verdict: it exits non-zero (:mod:`amp_conformance.plugin.verdict`)
and the report says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from amp_conformance.core import quarantine
from amp_conformance.plugin.report.banner import blamed_op
from amp_conformance.plugin.report.collect import tally
from amp_conformance.plugin.report.journal import quarantined
from amp_conformance.plugin.session_settings import settings
from amp_conformance.plugin.xdist_roles import is_xdist_controller, worker_input

#: the user property of the report of an item that called a quarantined op
PROPERTY = "amp_quarantined"
CATEGORY = "quarantined"
WORKER_KEY = "amp_quarantine_file"
_FILE = pytest.StashKey[str]()


def file_of(config: pytest.Config) -> str | None:
    """The run's quarantine file: the option's, a worker's from its controller, or None
    (also with ``--amp-no-quarantine``)."""
    if config.getoption("amp_no_quarantine", False):
        return None
    return (config.getoption("amp_quarantine_file", None)
            or worker_input(config).get(WORKER_KEY)
            or config.stash.get(_FILE, None))


def blame(config: pytest.Config, reason: str) -> str | None:
    """Record the op a lost device's reason blames, for every process of the run; the op,
    or None where the reason blames none or the run keeps no quarantine."""
    op, path = blamed_op(reason), file_of(config)
    if op and path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(op + "\n")
        return op
    return None


def reason_of(ops: list[str]) -> str:
    return (f"not run: {', '.join(ops)} {'loses' if len(ops) == 1 else 'lose'} the device "
            "(quarantined: it lost the device in an earlier item of this run)")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if (is_xdist_controller(config) and not config.getoption("amp_quarantine_file", None)
            and not config.getoption("amp_no_quarantine", False)):
        handle, path = tempfile.mkstemp(prefix="amp-quarantine-", suffix=".txt")
        os.close(handle)
        config.stash[_FILE] = path
        config.add_cleanup(lambda: Path(path).unlink(missing_ok=True))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    path = file_of(node.config)
    if path:
        node.workerinput[WORKER_KEY] = path


class Guard:
    """Registered where the items run: guards the file's ops before each item and reports
    an item that called one as not run."""

    def __init__(self, config: pytest.Config, path: str):
        self.config, self.path, self.seen = config, Path(path), 0

    def _refresh(self) -> None:
        try:
            ops = self.path.read_text(encoding="utf-8").split()
        except OSError:
            return
        for op in ops[self.seen:]:
            quarantine.guard(settings(self.config).device, op)
        self.seen = len(ops)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        self._refresh()
        quarantine.reset()
        with quarantine.fenced():
            return (yield)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        ops = quarantine.touched()
        if ops and not any(name == PROPERTY for name, _ in report.user_properties):
            if report.when == "teardown" and not report.failed:
                return report  # the call's report already says so
            report.outcome = "skipped"
            if hasattr(report, "wasxfail"):
                del report.wasxfail
            path, line, _ = item.location
            report.longrepr = (str(item.path), (line or 0) + 1, reason_of(ops))
            report.user_properties.append((PROPERTY, ops))
        return report


def pytest_report_teststatus(report: Any, config: pytest.Config) -> Any:
    if any(name == PROPERTY for name, _ in getattr(report, "user_properties", ())):
        return CATEGORY, "Q", "QUARANTINED"
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    path = file_of(session.config)
    if (path and not session.config.option.collectonly and session.items
            and not is_xdist_controller(session.config)):
        session.config.pluginmanager.register(Guard(session.config, path), "amp-conformance-guard")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    acc = tally(config)
    by_op = quarantined(acc) if acc is not None else {}
    if by_op:
        items = len({n for nodes in by_op.values() for n in nodes})
        terminalreporter.write_sep("!", f"amp-conformance: PARTIAL VERDICT: {items} items not "
                                        "run, quarantined: " + "; ".join(
                                            f"{op} loses the device ({len(n)} items)"
                                            for op, n in by_op.items()), red=True, bold=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    quarantine.release()
