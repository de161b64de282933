"""The property checks' examples reach the assertions that can fail.

A property passes when no example fails; that proves little if its examples never reach
an assertion (both sides raise, nothing is cast, the device's kernel is never entered).
Each property labels what its examples exercised (``checks/statistics.py``); these
tests run every property at the suite's own ``ci`` profile (derandomized, 25 examples)
and assert floors on the shares, so a generator that stops reaching its assertions fails
here rather than passing silently in the suite. The floors sit below what the generators
reach by construction (100% for the core assertions), with room for Hypothesis to draw
other examples after an upgrade.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.amp import autocast_mode

import amp_conformance.suite
from amp_conformance.checks import profiles, statistics
from amp_conformance.checks.call_forms import FORMS, Sizes, tensor_count
from amp_conformance.checks.custom_fwd import check as cfp
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.core.target import Target

SUITE = Path(amp_conformance.suite.__file__).parent
TARGETS = [Target("cpu"), Target("cuda", fake=True)]
DTYPES = [torch.bfloat16, torch.float16]

#: Floors of every policy property: the share of examples that reach a core assertion,
#: in which each kind of call compared outputs, and that mix devices. An ineligible dtype
#: (an integer, bool) makes some ops refuse the call on both sides: that call then tests
#: only that the input was not converted, so its floor is lower.
POLICY_FLOORS = {
    statistics.CORE: 0.9,
    "all eligible call: outputs compared": 0.9,
    "output dtype asserted": 0.8,
    "ineligible dtype": 0.9,
    "ineligible dtype call: outputs compared": 0.5,
    "device mix": 0.9,
}
#: At most this share of examples may be rejected (every call raised on both sides).
MAX_REJECTED = 0.1

CAST_FLOORS = {
    statistics.CORE: 0.8,
    cfp.CAST_PAYLOAD: 0.8,
    "other device's tensor in payload": 0.6,
    "float64, integer or bool tensor in payload": 0.6,
    "numpy array in payload": 0.6,
    "opaque object in payload": 0.6,
    "nested containers": 0.4,
    "no-op: disabled region": 0.6,
    "no-op: no cast_inputs": 0.6,
}


#: the ci profile (tests/conftest.py), whatever the run selected
pytestmark = pytest.mark.usefixtures("ci")


def _assert_floors(reach: statistics.Reach, floors: dict[str, float],
                   max_examples: int | None = None) -> None:
    low = {text: round(reach.share(text), 2) for text, floor in floors.items()
           if reach.share(text) < floor}
    assert not low, f"below the floors {floors}: {low}\n{reach.summary()}"
    assert reach.examples >= (max_examples or profiles.selected().max_examples), reach.summary()
    assert reach.rejected <= MAX_REJECTED * reach.examples, reach.summary()


@pytest.mark.parametrize("policy", list(policy_properties.POLICIES))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_policy_examples_reach_their_assertions(target, dtype, policy):
    reach = policy_properties.check_policy_property(
        target, dtype, policy, profiles.selected(), values=target.has_values)
    _assert_floors(reach, {**POLICY_FLOORS,
                           **({"values compared": 0.8} if target.has_values else {})})


def _takes_two_tensors(op: str) -> bool:
    return tensor_count(FORMS[op](Sizes(1, 1, 1, 1, 2))) > 1


@pytest.mark.slow
@pytest.mark.parametrize("target, dtype", list(zip(TARGETS, DTYPES, strict=True)), ids=str)
def test_per_op_examples_reach_their_assertions(target, dtype):
    """What the suite's items run: one op each, at the fewer examples of one part
    (``profiles.selected_part``). An op of one tensor has no device mix of its own (the
    device's tensor comes first); the other ops' items mix devices."""
    part = profiles.selected_part()
    for policy in policy_properties.POLICIES:
        for cand in policy_properties.candidates(target, dtype, policy):
            reach = policy_properties.check_policy_property(
                target, dtype, policy, part, values=target.has_values, ops=[cand.op])
            floors = {text: floor for text, floor in POLICY_FLOORS.items()
                      if text != "device mix" or _takes_two_tensors(cand.op)}
            if target.has_values:
                floors["values compared"] = 0.8
            _assert_floors(reach, floors, part.max_examples)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_cast_inputs_examples_cast_payloads(target, dtype):
    reach = cfp.check_cast_inputs_property(target, dtype, profiles.selected())
    _assert_floors(reach, CAST_FLOORS)


def test_statistics_count_examples_and_rejections():
    """The tally itself: labels count once per example; rejected examples count apart."""
    from hypothesis import assume, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=20, derandomize=True, database=None)
    @given(st.integers(0, 10**6))
    def prop(n):
        with statistics.example():
            statistics.label("drawn")
            statistics.label("drawn")
            assume(n % 5 != 1)
            if n % 2 == 0:
                statistics.label("even")

    with statistics.tallied("prop") as reach:
        prop()
    assert reach.counts["drawn"] == reach.examples >= 20
    assert 0 < reach.counts["even"] < reach.examples
    assert reach.counts[f"{statistics.REJECTED}: drawn"] == reach.rejected > 0
    assert "prop: " in reach.summary() and "% drawn" in reach.summary()


@pytest.fixture
def inner_run(pytester, monkeypatch):
    """Run pytest in-process; the profile it selects and any patch are undone after."""
    monkeypatch.setattr(profiles, "_selected", profiles._selected)
    monkeypatch.setattr(autocast_mode, "_cast", autocast_mode._cast)
    return pytester


def test_reach_shown_with_hypothesis_statistics(inner_run):
    """--hypothesis-show-statistics prints each property item's reach; every item that
    ran a property carries it as a user property (JUnit XML, the report)."""
    result = inner_run.runpytest(
        str(SUITE / "test_custom_fwd.py"), "-k", "cast_inputs and bfloat16",
        "-p", "amp_conformance.checks.statistics", "--hypothesis-show-statistics",
        "-p", "no:randomly", "--junitxml", "report.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*amp-conformance property reach*",
        "*test_cast_inputs*",
        "*custom_fwd_cast_inputs_bfloat16 on cpu: * examples*% cast payload*",
    ])
    xml = (inner_run.path / "report.xml").read_text()
    assert statistics.USER_PROPERTY in xml and "% core assertion ran" in xml
