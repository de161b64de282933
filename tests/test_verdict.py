"""The exit status, decided in one place (plugin/verdict.py) by ordered rules."""

from __future__ import annotations

import pytest

from amp_conformance.plugin import verdict
from amp_conformance.plugin.verdict import DEVICE_LOST, Facts, exit_status

OK, FAILED = pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED
INTERRUPTED, USAGE = pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR
EMPTY = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.parametrize("status, facts, expected", [
    (OK, Facts(), OK),
    (FAILED, Facts(), FAILED),
    # 1. a lost device wins over everything, an xdist controller's interruption included
    (INTERRUPTED, Facts(lost=True), DEVICE_LOST),
    (FAILED, Facts(lost=True, setup_errors=("x",), quarantined=True), DEVICE_LOST),
    # 2. pytest's own statuses stand
    (INTERRUPTED, Facts(quarantined=True, nothing_executed=True), INTERRUPTED),
    (USAGE, Facts(), USAGE),
    # 3. an opt-in tier that ran nothing, where pytest says 0 or 5
    (OK, Facts(setup_errors=("--amp-opinfo ran nothing",)), USAGE),
    (EMPTY, Facts(setup_errors=("x",)), USAGE),
    (FAILED, Facts(setup_errors=("x",)), FAILED),
    # 5. a partial verdict is no pass
    (OK, Facts(quarantined=True), FAILED),
    (OK, Facts(quarantined=True, nothing_executed=True), FAILED),
    # 6. nothing executed
    (OK, Facts(nothing_executed=True), EMPTY),
])
def test_the_first_rule_that_holds_decides(status, facts, expected):
    assert exit_status(status, facts) == expected


def test_an_item_that_ran_is_one_that_was_not_skipped():
    assert verdict.nothing_executed([{"outcome": "skipped"}, {"outcome": "not run"}])
    assert not verdict.nothing_executed([{"outcome": "skipped"}, {"outcome": "xfailed"}])
    assert not verdict.nothing_executed([])  # no conformance item: another project's run
