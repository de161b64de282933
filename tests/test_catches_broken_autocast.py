"""The suite fails on broken autocast implementations, naming what is broken."""

import pytest
import torch

from amp_conformance.checks import oplist_checks
from amp_conformance.checks.case import Case
from amp_conformance.checks.reproduction import reproduction
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.tools.selftest.catalogue import CATALOGUE


def _run(pytester, monkeypatch, mutant_name=None, *extra):
    mutant = CATALOGUE[mutant_name]
    args = ["--pyargs", "amp_conformance.suite", "-k", mutant.select, *mutant.suite_options(), *extra]
    if mutant_name is not None:
        monkeypatch.setenv("AMP_CONFORMANCE_MUTANT", mutant_name)
        args = ["-p", "amp_conformance.tools.selftest.plugin", *args]
    return pytester.runpytest(*args)


@pytest.mark.parametrize("name", ["mm-kept-fp32", "exit-forgets-outer-dtype"])
def test_mutant_fails_the_checks_that_cover_it(pytester, monkeypatch, name):
    before = AutocastState.capture("cpu")
    result = _run(pytester, monkeypatch, name)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()[-3000:]
    for text in CATALOGUE[name].expected_texts:
        assert text in result.stdout.str()
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
            oplist_checks.check_policy(case)
    finally:
        undo()
    message = str(info.value)
    for words in ("torch.mm", "entry mm", "on cpu", "torch.bfloat16",
                  "output dtype torch.float32, expected torch.bfloat16", "reproduce:"):
        assert words in message, message
    oplist_checks.check_policy(case)  # restored


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
