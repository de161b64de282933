"""What the items' outcomes say beyond pytest's counts, on the process that runs the session.

- **Failures by cause.** The terminal summary groups the failed conformance items by
  cause (:mod:`amp_conformance.plugin.report.causes`): 255 red items with one cause read as
  one line, largest first.
- **An opt-in tier that ran nothing.** A tier asked for by its option (``--amp-opinfo``,
  ``--amp-compile``, ``--wrapper``: the registry's ``opt_in``) whose every item was skipped
  did not run at all: that is a setup error (the samples cannot be drawn on the device, the
  backend lacks what the tier needs…), never a quiet green, even where the rest of the run
  passed. The run fails with exit status
  4 naming the tier and the cause, and the report says so (``run.setup_errors``);
  ``--amp-allow-empty`` lets it pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from amp_conformance.checks import registry
from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.collect import ITEM_PROPERTY, SETUP_ERRORS, message_of
from amp_conformance.plugin.xdist_roles import is_worker

_ROWS = pytest.StashKey[dict]()
#: a tier of fewer items than this says too little to call its skips a setup error
MIN_ITEMS = 2
#: an outcome's weight when an item reports several phases: the worst one stays
_RANK = {"passed": 0, "skipped": 1, "xfailed": 2, "xpassed": 3, "failed": 4, "error": 5}


def _category(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed"
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped" if report.skipped else "passed"


class Outcomes:
    """One row per conformance item (its info, final outcome and message), as the report's
    results, but kept in this process whether or not a report file is written."""

    def __init__(self, config: pytest.Config):
        self.config = config
        config.stash[_ROWS] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        info = dict(getattr(report, "user_properties", ()) or ()).get(ITEM_PROPERTY)
        if info is None or info.get("check") is None:
            return  # not a conformance item
        category = _category(report)
        if category == "passed" and report.when != "call":
            return
        rows = self.config.stash[_ROWS]
        row = rows.get(report.nodeid)
        if row is None or _RANK[category] > _RANK[row["outcome"]]:
            rows[report.nodeid] = {**info, "outcome": category,
                                   "message": message_of(report, category),
                                   "param": report.nodeid.rpartition("[")[2].rstrip("]")}


def rows(config: pytest.Config) -> list[dict[str, Any]]:
    return list(config.stash.get(_ROWS, {}).values())


def setup_errors(items: list[dict[str, Any]]) -> list[str]:
    """One sentence per opt-in tier all of whose items (at least MIN_ITEMS) were skipped,
    naming the cause most of them share."""
    found = []
    for check in registry.REGISTRY.values():
        if check.opt_in is None:
            continue
        tier = [r for r in items if r.get("check") == check.name]
        if len(tier) < MIN_ITEMS or any(r["outcome"] != "skipped" for r in tier):
            continue
        grouped = causes.group(tier, ("skipped",))
        largest = grouped[0]
        rest = len(tier) - largest["count"]
        others = (f" ({rest} more for {len(grouped) - 1} other cause"
                  f"{'s' if len(grouped) > 2 else ''})" if rest else "")
        how = "for one cause" if not rest else f"{largest['count']} of them for one cause"
        found.append(f"{check.opt_in} ran nothing: all {len(tier)} of its items were skipped, "
                     f"{how}: {largest['example']}{others}")
    return found


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if not is_worker(session.config):
        session.config.pluginmanager.register(Outcomes(session.config), "amp-conformance-outcomes")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if is_worker(config) or _ROWS not in config.stash:
        return
    errors = [] if config.getoption("amp_allow_empty", False) else setup_errors(rows(config))
    config.stash[SETUP_ERRORS] = errors
    if errors and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if is_worker(config):
        return
    grouped = causes.group(rows(config))
    if grouped:
        terminalreporter.write_sep("-", f"amp-conformance: {causes.headcount(grouped)}, "
                                        "largest first")
        for row in grouped[:10]:
            more = f" (and {row['count'] - 1} more)" if row["count"] > 1 else ""
            terminalreporter.write_line(f"{row['count']:>5} × {row['cause']}")
            terminalreporter.write_line(f"        e.g. {row['items'][0]}{more}")
        if len(grouped) > 10:
            terminalreporter.write_line(f"  … and {len(grouped) - 10} more causes")
    for error in config.stash.get(SETUP_ERRORS, []):
        terminalreporter.write_sep("!", f"amp-conformance: SETUP ERROR: {error}", red=True,
                                   bold=True)
