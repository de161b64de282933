"""The mutant plugin (plugin/mutant.py, with the machinery of checks/mutation.py): a
selftest mutant applied to a whole run of the suite, through pytest (``pytester``,
in-process), fails the checks that cover it, each failure naming what is broken in its own
message, and leaves no autocast state behind; the same selection passes unmutated."""

import pytest

from amp_conformance.checks.registry import mutants
from amp_conformance.core.state import AutocastState
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
