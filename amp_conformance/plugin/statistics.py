"""What the property checks' examples exercised (:mod:`amp_conformance.checks.statistics`):
each item that ran a property carries its summary as the user property
``amp_property_reach`` (JUnit XML, the report), and ``--hypothesis-show-statistics`` prints
them in an "amp-conformance property reach" section (the suite's items are not ``@given``
themselves, so Hypothesis's own statistics do not cover them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from amp_conformance.checks import statistics

_SECTION = "amp-conformance property reach"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    statistics.forget()  # runs outside any item (or of an earlier one) are not this item's
    try:
        return (yield)
    finally:
        for reach in statistics.finished():
            item.user_properties.append((statistics.USER_PROPERTY, reach.summary()))
        statistics.forget()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not terminalreporter.config.getoption("hypothesis_show_statistics", default=False):
        return
    lines = sorted(f"{report.nodeid}\n  {value}"
                   for reports in terminalreporter.stats.values() for report in reports
                   if getattr(report, "when", None) == "call"
                   for name, value in getattr(report, "user_properties", ())
                   if name == statistics.USER_PROPERTY)
    if lines:
        terminalreporter.section(_SECTION)
        for line in lines:
            terminalreporter.write_line(line)
