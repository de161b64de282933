"""The property checks (the suite module ``suite/test_properties.py``) run as one item per
part, so an expected failure covers one part.

It makes one item per (policy, op) of the device's op lists and one per rule of the
region state machine, plus ``all_rules``; these tests run it through pytest (``pytester``,
in-process) on cpu: the ids name the op and the rule and do not change between runs, an
expected-failures line for one op's item marks that item only, and a rule whose item is an
expected failure is left out of ``all_rules`` (which says so) while the other rules still
run there.
"""

from __future__ import annotations

import pytest
import torch

from amp_conformance.checks import profiles
from amp_conformance.checks.policy import params as policy_params
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.checks.regions import machine as regions
from amp_conformance.core.target import Target
from amp_conformance.plugin.options import Settings
from amp_conformance.suite import test_properties as suite
from tests.mutants import (
    CPU,
    below,
    overridden,
    plant_inheriting_threads,
    plant_undecorating_decorator,
)

SUITE = ("--pyargs", "amp_conformance.suite.test_properties", "-p", "no:randomly")
POLICY_TESTS = ("test_policy_casts_only_eligible_inputs", "test_policy_equals_hand_cast_control")


@pytest.fixture
def inner_run(pytester, monkeypatch):
    """Run pytest in-process; the profile it selects and any patch are undone after."""
    monkeypatch.setattr(profiles, "_selected", profiles._selected)
    return pytester


def _collected(pytester, *args: str) -> list[str]:
    result = pytester.runpytest(*SUITE, "--collect-only", "-q", *args)
    assert result.ret == 0, result.stdout.str()
    return [line.split("::", 1)[1] for line in result.stdout.lines if "::" in line]


def _expected_policy_ids(target: Target, dtypes: tuple[str, ...]) -> list[str]:
    ids = []
    for test in POLICY_TESTS:
        for dtype in dtypes:
            for policy in policy_properties.POLICIES:
                ops = sorted({c.op for d in dtypes for c in policy_properties.candidates(
                    target, getattr(torch, d), policy)})
                ids += [f"{test}[{target.device}-{dtype}-{policy}-{op}]" for op in ops]
    return ids


def test_ids_name_the_op_and_the_rule_and_are_stable(inner_run):
    """(a) one item per (amp dtype, policy, op), the op last in the id, sorted; one per
    rule; the same ids on every collection (pytest-xdist workers compare them too)."""
    first = _collected(inner_run)
    assert first == _collected(inner_run)
    rules = ["enter_region-exit_region", "exit_region_by_exception", "region_body_raises",
             "decorated_call", "disabled_subregion", "fresh_thread", "all_rules"]
    assert first == ([f"test_regions_stack[cpu-{r}]" for r in rules]
                     + _expected_policy_ids(CPU, ("bfloat16", "float16")))
    assert "test_policy_casts_only_eligible_inputs[cpu-bfloat16-lower-mm]" in first
    fake = _collected(inner_run, "--device", "cuda", "--fake", "--amp-dtype", "float16")
    assert "test_policy_casts_only_eligible_inputs[cuda-float16-lower-__matmul__]" in fake
    assert [i for i in fake if i.startswith(POLICY_TESTS)] == _expected_policy_ids(
        Target("cuda", fake=True), ("float16",))


def mm_casting_float64():
    """A broken AutocastCPU mm kernel: it casts every floating input, float64 too."""

    def mm(a, b):
        def cast(t):
            return t.to(torch.get_autocast_dtype("cpu")) if t.is_floating_point() else t

        with below("AutocastCPU"):
            return torch.mm(cast(a), cast(b))

    return overridden("mm", "AutocastCPU", mm)


def test_xfail_line_for_one_op_marks_only_its_item(inner_run):
    """(b) with mm broken, the line for mm's item makes it an expected failure; every other
    op of the policy (matmul, linear, ... call mm below autocast) still runs and passes."""
    xfails = inner_run.path / "xfail.txt"
    xfails.write_text("test_policy_casts_only_eligible_inputs[cpu-bfloat16-lower-mm]"
                      "  # mm casts float64\n")
    with mm_casting_float64():
        result = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-rxX",
                                     "-k", "casts_only_eligible_inputs and bfloat16-lower")
    result.assert_outcomes(xfailed=1, passed=len(policy_properties.candidates(
        CPU, torch.bfloat16, "lower")) - 1)
    result.stdout.fnmatch_lines(["*XFAIL*[[]cpu-bfloat16-lower-mm[]]*mm casts float64*"])


def test_op_of_one_amp_dtype_is_skipped_as_not_applicable_under_the_other(inner_run):
    """An op listed for float16 only is an item under both dtypes; under bfloat16 it is
    reported skipped, "not applicable: ...", never passed."""
    only16 = inner_run.path / "only16.toml"
    only16.write_text('[list]\ndevice = "cpu"\n[[entry]]\nid = "mm"\nop = "mm"\n'
                      'category = "torch_16"\noverride = true\namp_dtypes = ["float16"]\n'
                      'args = [{shape = [8, 8]}, {shape = [8, 8]}]\n')
    result = inner_run.runpytest(*SUITE, f"--oplist={only16}", "-rs", "-k", "lower-mm")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*SKIPPED*not applicable: mm is no lower op under autocast "
                                 "bfloat16 on cpu (entry mm is listed for float16 only)*"])


def test_policy_without_candidates_keeps_one_skipped_item(monkeypatch):
    real = policy_properties.candidates
    monkeypatch.setattr(policy_properties, "candidates", lambda target, dtype, policy, *a:
                        [] if policy == "promote" else real(target, dtype, policy, *a))
    params = policy_params.policy_op_params(None, Settings("cpu", (torch.bfloat16,), "bitwise", False))
    promote = [p for p in params if p.values[0] == "promote"]
    assert [p.id for p in promote] == ["promote"] and promote[0].values[1] is None
    (mark,) = promote[0].marks
    assert mark.name == "skip" and mark.kwargs["reason"].startswith("not applicable: no op")


def _break_decorator_and_threads(monkeypatch) -> None:
    """Two rules broken: decorated_call (the decorator form makes no region) and
    fresh_thread (a new thread of the region machine inherits autocast state)."""
    plant_undecorating_decorator(monkeypatch)
    plant_inheriting_threads(monkeypatch)


@pytest.mark.slow
def test_rule_listed_as_expected_failure_is_left_out_of_all_rules(inner_run, monkeypatch):
    """(c) decorated_call and fresh_thread broken, decorated_call listed: its item is an
    expected failure and all_rules leaves it out and says so, but still runs the other
    rules: it fails, on fresh_thread. With fresh_thread listed too (by a node-id prefix),
    all_rules passes, also when -k deselects the rule items."""
    _break_decorator_and_threads(monkeypatch)
    xfails = inner_run.path / "xfail.txt"
    xfails.write_text("test_regions_stack[cpu-decorated_call]  # no region when decorated\n")
    result = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-k", "regions_stack")
    result.assert_outcomes(xfailed=1, failed=2, passed=4)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*all_rules left out the rules decorated_call: their items are expected failures "
        "(decorated_call: no region when decorated [[]*xfail.txt:1[]]); it runs enter_region, "
        "exit_region, exit_region_by_exception, region_body_raises, disabled_subregion, "
        "fresh_thread*"])
    assert "in rule fresh_thread (machine of the rules enter_region, exit_region, " \
           "exit_region_by_exception, region_body_raises, disabled_subregion, fresh_thread)" in out
    for item in ("fresh_thread", "all_rules"):
        result.stdout.fnmatch_lines([f"FAILED *test_regions_stack[[]cpu-{item}[]]*"])

    xfails.write_text("test_regions_stack[cpu-decorated_call]  # no region when decorated\n"
                      "test_properties.py::test_regions_stack[cpu-fresh  # threads share state\n")
    result = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-k", "regions_stack", "-rP")
    result.assert_outcomes(xfailed=2, passed=5)
    result.stdout.fnmatch_lines(["*all_rules left out the rules decorated_call, fresh_thread:*"])
    alone = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-k", "all_rules", "-rP")
    alone.assert_outcomes(passed=1)
    alone.stdout.fnmatch_lines(["*all_rules left out the rules decorated_call, fresh_thread:*"])


def test_broad_line_leaves_no_rule_out(inner_run):
    """A line that lists all_rules too (a prefix of every item) leaves nothing out:
    all_rules is then an expected failure as a whole."""
    xfails = inner_run.path / "xfail.txt"
    xfails.write_text("test_regions_stack[cpu-  # every item\n")
    result = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-k", "all_rules", "-rX")
    result.assert_outcomes(failed=1)  # strict: all_rules passes with every rule in it
    assert "left out" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*XPASS(strict)*"])


def test_every_rule_runs_in_an_item_with_the_base_rules():
    assert set(suite.RULE_ITEMS) == {suite.BASE, suite.ALL_RULES,
                                     *(set(regions.RULES) - set(regions.BASE_RULES))}
    for name, rules in suite.RULE_ITEMS.items():
        assert set(regions.BASE_RULES) <= set(rules), name
        assert name in (suite.BASE, suite.ALL_RULES) or name in rules


def test_base_rules_listed_leave_only_the_rules_that_open_their_own_regions(inner_run):
    """The base rules' item listed: all_rules runs without enter_region, so without the
    rules that need an open region too, and says so."""
    xfails = inner_run.path / "xfail.txt"
    xfails.write_text("test_regions_stack[cpu-enter_region-exit_region]  # entering is broken\n")
    result = inner_run.runpytest(*SUITE, f"--xfail-file={xfails}", "-k", "all_rules", "-rP")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*all_rules left out the rules enter_region, exit_region, exit_region_by_exception: "
        "their items are expected failures (enter_region-exit_region: entering is broken*); "
        "it runs region_body_raises, decorated_call, disabled_subregion, fresh_thread*"])
