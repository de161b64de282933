"""The suite fails on broken autocast implementations, naming what is broken."""

import dataclasses

import pytest
import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.outside.check import check_outside
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.checks.registry import mutants
from amp_conformance.checks.reproduction import reproduction
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.tools.selftest import runner

CATALOGUE = mutants()


def _run(pytester, monkeypatch, mutant_name=None, *extra):
    mutant = CATALOGUE[mutant_name]
    args = ["--pyargs", "amp_conformance.suite", "-k", mutant.select, *mutant.suite_options(),
            "--tb=short", *extra]
    if mutant_name is not None:
        monkeypatch.setenv("AMP_CONFORMANCE_MUTANT", mutant_name)
        args = ["-p", "amp_conformance.plugin.mutant", *args]
    return pytester.runpytest(*args)


@pytest.mark.parametrize("name, failing", [
    ("mm-kept-fp32", "test_policy[cpu-bfloat16-torch_16-mm]"),
    # both dtype items fail: the first to run on the nested region's dtype, the other on
    # the state the broken exit leaked into it (which runs first depends on the order)
    ("exit-forgets-outer-dtype", "test_other_dtype_subregion_restores_outer[cpu-"),
])
def test_mutant_fails_the_checks_that_cover_it(pytester, monkeypatch, name, failing):
    before = AutocastState.capture("cpu")
    result = _run(pytester, monkeypatch, name)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()[-3000:]
    # a failing test of the mutant's own check says what is broken in its own message (its
    # E lines): not a test id, not the output as a whole, not several messages pieced together
    failures = runner.Run(name, result.ret, result.stdout.str(), 0.0).failures()
    assert len(failures) == outcomes["failed"], list(failures)
    texts = CATALOGUE[name].expected_texts
    naming = [test for test, message in failures.items()
              if test.startswith(failing) and all(text in message for text in texts)]
    assert naming, f"no failing {failing}... test says all of {texts} itself: {failures}"
    assert AutocastState.capture("cpu") == before, "the mutant run left autocast state behind"


@pytest.mark.parametrize("name", ["mm-kept-fp32", "exit-forgets-outer-dtype"])
def test_same_selection_passes_unmutated(pytester, monkeypatch, name):
    monkeypatch.delenv("AMP_CONFORMANCE_MUTANT", raising=False)
    mutant = CATALOGUE[name]
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "-k", mutant.select)
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and outcomes.get("passed", 0) >= 1, result.stdout.str()[-3000:]


def test_policy_failure_message_names_op_entry_device_and_dtypes():
    entry = next(e for e in oplist.load("cpu").entries if e.id == "mm")
    case = Case(Target("cpu"), torch.bfloat16, entry)
    undo = CATALOGUE["mm-kept-fp32"].apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    finally:
        undo()
    message = str(info.value)
    for words in ("torch.mm", "entry mm", "on cpu", "torch.bfloat16",
                  "output dtype torch.float32, expected torch.bfloat16", "reproduce:"):
        assert words in message, message
    check_policy(case)  # restored


def test_reproduction_rebuilds_the_same_inputs():
    """The printed reproduction, run as code, gives what the harness saw."""
    entry = next(e for e in oplist.load("cpu").entries if e.id == "addmm")
    case = Case(Target("cpu"), torch.bfloat16, entry)
    source = reproduction(case, "torch.addmm", torch.bfloat16)
    namespace = {}
    exec("\n".join(line[4:] for line in source.splitlines()), namespace)  # noqa: S102
    args, kwargs = case.build_inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.addmm(*args, **kwargs)
    assert torch.equal(namespace["out"], expected)


def test_outside_error_must_be_the_recorded_one():
    """expect_outside = "error" is checked against the message observed (error_outside): an
    unrelated error outside autocast does not pass for the missing kernel."""
    entry = next(e for e in oplist.load("cpu").entries if e.id == "fft_fft")
    case = Case(Target("cpu"), torch.bfloat16, entry)
    check_outside(case)
    other = Case(Target("cpu"), torch.bfloat16, dataclasses.replace(entry, error_outside="no such message"))
    with pytest.raises(ConformanceFailure) as info:
        check_outside(other)
    message = str(info.value)
    assert "raised outside autocast RuntimeError: 'Unsupported dtype BFloat16'" in message, message
    assert "error_outside = 'no such message'" in message
    with pytest.raises(oplist.OpListError, match="error_outside"):
        oplist.parse_entry({"id": "x", "op": "fft_fft", "category": "fft_fp32",
                            "args": [{"shape": [8], "dtype": "amp"}], "expect_outside": "error"},
                           "x.toml", 0, "cpu")
    with pytest.raises(oplist.OpListError, match="not a regular expression"):
        oplist.parse_entry({"id": "x", "op": "fft_fft", "category": "fft_fp32",
                            "args": [{"shape": [8], "dtype": "amp"}], "expect_outside": "error",
                            "error_outside": "(unclosed"}, "x.toml", 0, "cpu")
