"""The mutation campaign (``python -m amp_conformance selftest``) and its catalogue."""

import argparse
import dataclasses
import sys

import pytest
import torch

from amp_conformance.checks.mutation import Mutant, register
from amp_conformance.checks.numerics import mutants as mutants_numerics
from amp_conformance.checks.registry import mutants
from amp_conformance.tools.selftest import runner
from tests import children

CATALOGUE = mutants()

#: A fast, representative part of the campaign for CI: a wrong policy, wrong numerics,
#: region state, the cast cache, an error path, and a fake-tier AutocastCUDA kernel (a
#: banned op allowed). The whole campaign: ``python -m amp_conformance selftest --all``.
REPRESENTATIVE = (
    "mm-kept-fp32",
    "mm-one-ulp-off",
    "exit-forgets-outer-dtype",
    "cache-never-cleared",
    "invalid-device-accepted",
    "cuda-binary_cross_entropy-not-banned",
)


# -- the catalogue -------------------------------------------------------------------


def test_catalogue_has_at_least_25_mutants():
    assert len(CATALOGUE) >= 25, sorted(CATALOGUE)
    assert len([m for m in CATALOGUE.values() if not m.fake]) >= 25


def test_the_selftest_page_says_how_many_mutants_the_catalogue_holds():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "selftest.md").read_text()
    assert f"The catalogue holds {len(CATALOGUE)} mutants" in page


def test_names_are_unique_and_match_their_keys():
    assert all(name == m.name for name, m in CATALOGUE.items())
    with pytest.raises(ValueError, match="registered twice"):
        register(CATALOGUE["mm-kept-fp32"])


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_mutant_says_what_it_breaks_and_what_catches_it(name):
    m = CATALOGUE[name]
    assert m.description.strip(), "a mutant says what it breaks"
    assert m.select.strip(), "a mutant selects the checks that must catch it (-k)"
    assert m.expected_texts and all(t.strip() for t in m.expected_texts), (
        "a mutant names the words its failure message must contain"
    )
    assert callable(m.apply)
    assert m.suite_options()[:2] == ["--device", m.device]
    assert m.fake == ("--fake" in m.suite_options())
    assert m.gap is None or m.gap.strip()


def test_catalogue_spans_the_kinds_of_breakage():
    names = set(CATALOGUE)
    for wanted in ("mm-kept-fp32", "mse_loss-in-lower-precision", "cat-promotes-to-narrowest",
                   "add-given-lower-precision-policy", "max_pool3d-uncast", "mm-one-ulp-off",
                   "mm-casts-float64", "cat-casts-integers", "exit-forgets-outer-dtype",
                   "exit-forgets-cache-flag", "cache-never-enabled", "cache-never-cleared",
                   "invalid-device-accepted", "unsupported-dtype-no-warning",
                   "unsupported-dtype-not-disabled", "decorator-accepts-non-callable",
                   "legacy-cpu-autocast-drops-dtype", "custom_fwd-ignores-cast_inputs",
                   "custom_bwd-ignores-forward-state", "cuda-mm-kept-fp32",
                   "cuda-softmax-ignores-explicit-dtype", "cuda-binary_cross_entropy-not-banned"):
        assert wanted in names
    # the fake tier: cuda's policy, and mps refusing float64 as the device does
    assert {m.device for m in CATALOGUE.values() if m.fake} == {"cuda", "mps"}


def _observable_state():
    """What mutants patch: torch.autocast's methods, the cache function, custom_fwd/bwd,
    the legacy entry point, and the dtypes a few overridden kernels give."""
    amp = torch.amp.autocast_mode
    legacy = torch.cpu.amp.autocast
    attrs = {
        **{f"autocast.{k}": v for k, v in vars(amp.autocast).items() if k.startswith("__")},
        "clear_autocast_cache": torch.clear_autocast_cache,
        "custom_fwd": (torch.amp.custom_fwd, amp.custom_fwd),
        "custom_bwd": (torch.amp.custom_bwd, amp.custom_bwd),
        "_cast": amp._cast,
        **{f"legacy.{k}": v for k, v in vars(legacy).items() if k in ("__init__", "__new__")},
    }
    a = torch.ones(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        kernels = (torch.mm(a, a).dtype, torch.cat([a, a.bfloat16()]).dtype,
                   torch.add(a, a.bfloat16()).dtype, torch.nn.functional.linear(a, a).dtype)
    return attrs, kernels


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_undo_restores_what_the_mutant_changed(name):
    before = _observable_state()
    undo = CATALOGUE[name].apply()
    undo()
    assert _observable_state() == before


# -- selection and judging -----------------------------------------------------------


def test_default_campaign_is_the_cpu_tier_and_fake_the_fake_tier():
    cpu = runner.select_mutants(None, False)
    fake = runner.select_mutants(None, True)
    assert cpu and all(m.device == "cpu" and not m.fake for m in cpu)
    assert fake and all(m.fake for m in fake)
    assert runner.select_mutants("cuda", True) == [m for m in fake if m.device == "cuda"]
    assert len(runner.select_mutants(None, False, every_tier=True)) == len(cpu) + len(fake)
    assert [m.name for m in runner.select_mutants(None, False, ["cuda-mm-kept-fp32"])] == [
        "cuda-mm-kept-fp32"]
    with pytest.raises(runner.SelectionError, match="--only no-such-mutant: no such mutant"):
        runner.select_mutants(None, False, ["no-such-mutant"])


def test_one_baseline_per_tier_with_the_union_of_selections():
    groups = runner.tiers(runner.select_mutants(None, False, every_tier=True))
    close = ("--device", "cpu", "--numerics", "close")  # the numerics family's mutants
    assert {("--device", "cpu"), ("--device", "cuda", "--fake"), close} <= set(groups)
    union = runner.union_selection(groups[("--device", "cpu")])
    assert "(test_policy and torch_16-mm) or (" in union


_MUTANT = Mutant("m", "breaks", lambda: lambda: None, expect=("torch.mm", "expected x"),
                 select="test_policy")

_FAILED = """\
F                                                                        [100%]
=================================== FAILURES ===================================
_____________ test_policy[cpu-bfloat16-torch_16-mm] _____________
amp_conformance/checks/policy/check.py:1: in check_policy
E   amp_conformance.core.errors.ConformanceFailure: torch.mm [entry mm] on cpu:
E     torch.mm inside autocast: output dtype torch.float32, expected x
=========================== short test summary info ============================
FAILED test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm] - amp_conformance...
1 failed, 1200 deselected in 0.70s
"""


@pytest.mark.parametrize("returncode, output, status", [
    (1, _FAILED, "killed"),
    (1, _FAILED.replace("expected x", "expected y"), "unnamed"),
    (0, "..    [100%]\n2 passed, 1200 deselected in 0.70s\n", "survived"),
    (4, "ERROR: amp-conformance: bad op list\n", "error"),
    (5, "1200 deselected in 0.70s\n", "error"),
    (None, "", "error"),
])
def test_judge(returncode, output, status):
    verdict = runner.judge(_MUTANT, runner.Run("m", returncode, output, 1.0))
    assert verdict.status == status, verdict.detail


_TWO_FAILED = """\
FF                                                                       [100%]
=================================== FAILURES ===================================
_____________ test_policy[cpu-bfloat16-torch_16-mm] _____________
amp_conformance/checks/policy/check.py:1: in check_policy
E   amp_conformance.core.errors.ConformanceFailure: torch.mm [entry mm] on cpu:
E     something else went wrong
_____________ test_policy[cpu-float16-torch_16-addmm] _____________
amp_conformance/checks/policy/check.py:1: in check_policy
E   amp_conformance.core.errors.ConformanceFailure: torch.addmm [entry addmm] on cpu:
E     torch.addmm inside autocast: output dtype torch.float32, expected x
=========================== short test summary info ============================
FAILED test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm] - amp_conformance...
FAILED test_oplist.py::test_policy[cpu-float16-torch_16-addmm] - amp_conformance...
2 failed, 1200 deselected in 0.70s
"""


def test_kill_needs_one_failing_test_that_says_every_expected_text():
    """'torch.mm' in one test's message and 'expected x' in another's is not a kill: no
    test both failed on the broken op and said what is wrong with it."""
    verdict = runner.judge(_MUTANT, runner.Run("m", 1, _TWO_FAILED, 1.0))
    assert verdict.status == "unnamed", verdict.detail
    assert "no failing test's own message says" in verdict.detail
    assert "each says only part of it" in verdict.detail
    named = _TWO_FAILED.replace("something else went wrong", "torch.mm ... expected x")
    verdict = runner.judge(_MUTANT, runner.Run("m", 1, named, 1.0))
    assert verdict.status == "killed" and verdict.detail == "by test_policy[cpu-bfloat16-torch_16-mm]"


def test_failures_are_split_by_test_and_stop_at_the_summary():
    failures = runner.Run("m", 1, _TWO_FAILED, 1.0).failures()
    assert list(failures) == ["test_policy[cpu-bfloat16-torch_16-mm]",
                              "test_policy[cpu-float16-torch_16-addmm]"]
    assert failures["test_policy[cpu-bfloat16-torch_16-mm]"].endswith("something else went wrong")
    assert "FAILED" not in "".join(failures.values())


def test_expect_must_be_in_a_message_not_only_in_a_test_id():
    """The test id names the entry; the kill needs the message to name it."""
    only_in_id = _FAILED.replace("E     torch.mm inside autocast", "E     inside autocast")
    only_in_id = only_in_id.replace("torch.mm [entry mm]", "[entry]")
    verdict = runner.judge(
        Mutant("m", "b", lambda: lambda: None, expect="torch_16-mm", select="x"),
        runner.Run("m", 1, only_in_id, 1.0),
    )
    assert verdict.status == "unnamed"


def _args(**kwargs):
    parser = argparse.ArgumentParser()
    runner.add_arguments(parser)
    args = parser.parse_args([])
    for k, v in kwargs.items():
        setattr(args, k, v)
    return args


class _Done:
    """A run of the suite that has already ended (the campaign's seam, runner.start)."""

    def __init__(self, run):
        self.run = run

    def poll(self):
        return self.run


def _started(fake_run_suite):
    """runner.start as a fake of the whole run: (label, select, options, mutant, timeout,
    cwd) -> Run."""
    return lambda *args: _Done(fake_run_suite(*args))


def test_red_baseline_stops_the_campaign_loudly(monkeypatch, capsys):
    ran = []

    def fake_run_suite(label, select, options, mutant, timeout, cwd):
        ran.append(mutant)
        return runner.Run(label, 1, _FAILED, 0.1)

    monkeypatch.setattr(runner, "start", _started(fake_run_suite))
    assert runner.run(_args(only=["mm-kept-fp32"])) == 2
    assert ran == [None], "no mutant runs on a red baseline"
    assert "BASELINE NOT GREEN" in capsys.readouterr().out


def test_summary_ends_with_killed_count_then_survivors(monkeypatch, capsys):
    def fake_run_suite(label, select, options, mutant, timeout, cwd):
        if mutant is None:
            return runner.Run(label, 0, "2 passed in 0.1s\n", 0.1)
        if mutant == "mm-kept-fp32":
            return runner.Run(label, 1, _FAILED.replace("expected x", "expected torch.bfloat16")
                                .replace("torch.mm [entry mm]", "torch.mm"), 0.1)
        return runner.Run(label, 0, "2 passed in 0.1s\n", 0.1)

    monkeypatch.setattr(runner, "start", _started(fake_run_suite))
    status = runner.run(_args(only=["mm-kept-fp32", "linear-kept-fp32"], jobs=1))
    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    assert lines[-2] == "killed 1/2"
    assert lines[-1].startswith("  survived: linear-kept-fp32")
    assert any(line.startswith("time: ") for line in lines)


def test_known_gap_survivor_is_reported_but_does_not_fail(monkeypatch, capsys):
    gap = dataclasses.replace(CATALOGUE["mm-kept-fp32"], name="synthetic-gap", gap="a known hole")
    monkeypatch.setitem(CATALOGUE, gap.name, gap)
    monkeypatch.setattr(runner, "start", lambda label, *a: _Done(runner.Run(
        label, 0, "4 passed in 0.1s\n", 0.1)))
    assert runner.run(_args(only=[gap.name])) == 0
    out = capsys.readouterr().out
    assert "killed 0/1" in out and f"survived: {gap.name}" in out and "known gap" in out
    assert runner.run(_args(only=[gap.name], strict=True)) == 1


# -- close mode ----------------------------------------------------------------------


def test_close_campaign_runs_its_mutants_with_numerics_close():
    mutants, declared = runner.close_campaign()
    assert [m.name for m in mutants] == list(mutants_numerics.CLOSE_MODE)
    assert all(m.suite_options()[-2:] == ["--numerics", "close"] for m in mutants)
    assert set(declared) == {"mm-one-ulp-off", "linalg_inv-one-ulp-off", "fft_fft-one-ulp-off"}
    assert all(declared.values())
    caught = [m for m in mutants if m.name not in declared]
    assert {"close-mm-result-in-float32", "close-mm-of-transposed",
            "close-mm-one-percent-off"} <= {m.name for m in caught}
    assert "--numerics close" in runner.reproduction(mutants[-1])
    only, _ = runner.close_campaign(["mm-kept-fp32"])
    assert only[0].suite_options() == ["--device", "cpu", "--numerics", "close"]
    with pytest.raises(runner.SelectionError, match="no mutant no-such"):
        runner.close_campaign(["no-such"])


def test_close_mode_counts_declared_survivors_apart(monkeypatch, capsys):
    """killed K/N counts the mutants close mode must catch; a declared survivor that is
    killed instead fails the campaign (close mode got stricter than documented)."""
    killed = _FAILED.replace("expected x", "not equal (within tolerance)")

    def fake_run_suite(label, select, options, mutant, timeout, cwd):
        assert "--numerics" in options
        if mutant is None or mutant == "mm-one-ulp-off":
            return runner.Run(label, 0, "2 passed in 0.1s\n", 0.1)
        return runner.Run(label, 1, killed, 0.1)

    monkeypatch.setattr(runner, "start", _started(fake_run_suite))
    args = _args(numerics="close", only=["close-mm-of-transposed", "mm-one-ulp-off"], jobs=1)
    assert runner.run(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "killed 1/1" in lines
    assert lines[-1].startswith("  survived as declared: mm-one-ulp-off: one ulp")
    monkeypatch.setattr(runner, "start", lambda label, *a: _Done(
        runner.Run(label, 1, killed, 0.1) if a[2] else runner.Run(label, 0, "2 passed in 0.1s\n",
                                                                   0.1)))
    assert runner.run(args) == 1
    assert "declared to survive, but unnamed: mm-one-ulp-off" in capsys.readouterr().out


# -- the campaign, for real ----------------------------------------------------------


@pytest.mark.slow
def test_representative_mutants_are_all_killed(tmp_path):
    """A fast part of the campaign, in subprocesses as the command runs it."""
    done = children.run(
        [sys.executable, "-m", "amp_conformance", "selftest", "--only", *REPRESENTATIVE],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert lines[-1] == f"killed {len(REPRESENTATIVE)}/{len(REPRESENTATIVE)}", done.stdout
    assert any(line.startswith("time: ") for line in lines)
    for name in REPRESENTATIVE:
        assert any(line.startswith("KILLED") and f" {name} " in line for line in lines), name


#: the OpInfo tier's mutants whose bug lives beyond the first two samples (mutants_opinfo)
BEYOND_TWO_SAMPLES = ("opinfo-conv2d-ignores-groups", "opinfo-mse-loss-drops-reduction",
                      "opinfo-matmul-vector-into-batch", "opinfo-baddbmm-ignores-beta")


@pytest.mark.slow
@pytest.mark.parametrize("name", BEYOND_TWO_SAMPLES)
def test_a_form_beyond_the_first_two_samples_needs_the_default_draw(pytester, monkeypatch, name,
                                                                     expecttest_installed):
    """The first two samples of the op pass the mutant; the default draw (every argument
    form) fails it, naming the op and a sample past the second."""
    mutant = CATALOGUE[name]
    monkeypatch.setenv("AMP_CONFORMANCE_MUTANT", name)
    args = ["-p", "amp_conformance.plugin.mutant", "--pyargs", "amp_conformance.suite",
            "-k", mutant.select, *mutant.suite_options(), "-p", "no:cacheprovider"]
    two = pytester.runpytest(*args, "--amp-opinfo-samples", "2")
    assert two.ret == pytest.ExitCode.OK, two.stdout.str()[-2000:]
    forms = pytester.runpytest(*args)
    assert forms.ret == pytest.ExitCode.TESTS_FAILED, forms.stdout.str()[-2000:]
    failures = runner.Run(name, forms.ret, forms.stdout.str(), 0.0).failures()
    assert any(all(t in message for t in mutant.expected_texts) for message in failures.values())


def test_a_keyword_value_only_some_samples_show_needs_the_keyword_search(pytester, monkeypatch,
                                                                       expecttest_installed):
    """The samples showing every form leave quantile's interpolation='midpoint' unseen: the
    mutant that drops it passes them and fails the default draw, which adds a sample where
    the value changes the result."""
    from amp_conformance.checks.opinfo import calls, forms

    name = "opinfo-quantile-ignores-interpolation"
    mutant = CATALOGUE[name]
    monkeypatch.setenv("AMP_CONFORMANCE_MUTANT", name)
    args = ["-p", "amp_conformance.plugin.mutant", "--pyargs", "amp_conformance.suite",
            "-k", mutant.select, *mutant.suite_options(), "-p", "no:cacheprovider"]
    with monkeypatch.context() as without:
        without.setattr(forms, "TRIES", 0)
        without.setattr(calls, "_COVERS", {})
        plain = pytester.runpytest(*args)
    assert plain.ret == pytest.ExitCode.OK, plain.stdout.str()[-2000:]
    monkeypatch.setattr(calls, "_COVERS", {})
    found = pytester.runpytest(*args)
    assert found.ret == pytest.ExitCode.TESTS_FAILED, found.stdout.str()[-2000:]
    failures = runner.Run(name, found.ret, found.stdout.str(), 0.0).failures()
    assert any(all(t in message for t in mutant.expected_texts) for message in failures.values())
