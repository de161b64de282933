"""Failures grouped by cause (plugin/report/causes.py, plugin/outcomes.py): one row per
cause, largest first, in the report, the terminal and ``run``'s ending line; an opt-in tier
that skipped every item for one cause fails the run as a setup error."""

from __future__ import annotations

import json
import os
import sys

import pytest

from amp_conformance.plugin.report import causes
from tests import children

MUTANT = ("-p", "amp_conformance.plugin.mutant", "--pyargs", "amp_conformance.suite",
          "-k", "torch_16-mm or torch_16-addmm", "-p", "no:cacheprovider")


def _result(message: str, **info: str) -> dict:
    return {"nodeid": info.pop("nodeid", "x::t[p]"), "outcome": "failed", "message": message,
            **info}


def test_what_names_the_item_is_masked():
    a = _result("amp_conformance.core.errors.ConformanceFailure: torch.mm [entry mm, category "
                "torch_16, /a/b/cpu.toml] on cpu, autocast dtype torch.bfloat16:\n  torch.mm "
                "inside autocast: output dtype torch.float32, expected torch.bfloat16",
                op="torch.mm", entry="mm", amp_dtype="bfloat16", param="cpu-bfloat16-torch_16-mm")
    b = _result("amp_conformance.core.errors.ConformanceFailure: torch.addmm [entry addmm-beta, "
                "category torch_16, /c/cpu.toml] on cpu, autocast dtype torch.float16:\n  "
                "torch.addmm inside autocast: output dtype torch.float32, expected torch.float16",
                op="torch.addmm", entry="addmm-beta", amp_dtype="float16")
    assert causes.cause(a) == causes.cause(b) == (
        "ConformanceFailure: <op> on cpu, autocast dtype <amp dtype>: <op> inside autocast: "
        "output dtype torch.float32, expected <amp dtype>")


def test_numbers_paths_and_hlo_names_are_masked_dtypes_are_not():
    one = _result("RuntimeError: during context [hlo verifier]: Seen floating point types of "
                  "different precisions in %multiply.12 = f32[8,8]{1,0} multiply(%p2.3, "
                  "%broadcast.4) at /tmp/x/y.py:10, 0x7f3a")
    two = _result("RuntimeError: during context [hlo verifier]: Seen floating point types of "
                  "different precisions in %multiply.7 = f32[4,2]{1,0} multiply(%p1.9, "
                  "%broadcast.1) at /opt/z.py:99, 0x1")
    assert causes.cause(one) == causes.cause(two)
    assert "f32[N,N]" in causes.cause(one) and "float32" not in causes.cause(one)
    bf16 = _result(one["message"].replace("f32", "bf16"))
    assert causes.cause(bf16) != causes.cause(one), "the dtype is part of the cause"


def test_only_paths_are_masked_as_paths():
    """A ``/`` between words or numbers is no path; absolute paths and relative ones naming a
    file are."""
    for text, masked in [
        ("float16 needs AVX512-FP16/AMX-FP16", "<amp dtype> needs AVX512-FP16/AMX-FP16"),
        ("no legacy custom_fwd/custom_bwd", "no legacy custom_fwd/custom_bwd"),
        ("omitted during the selective/custom build process", "omitted during the "
         "selective/custom build process"),
        ("coverage cpu: 126/127 covered", "coverage cpu: N/N covered"),
        ("in /tmp/site/amp_conformance/oplists/cpu.toml, line 3", "in <path>, line N"),
        ("see oplists/cpu_policy.toml and amp_conformance/suite/test_oplist.py:12",
         "see <path> and <path>:N"),
        ("(C:/Users/x/cpu.toml)", "(<path>)"),
    ]:
        assert causes.cause(_result(f"E: {text}")) == f"E: {masked}", text


def test_every_spelling_of_an_amp_dtype_is_one_cause():
    """Whichever autocast dtype an item ran under, and however a message spells the amp
    dtypes (ours, PyTorch's, C++'s), one cause is one row."""
    skip = ("oneDNN has no LSTM primitive for this autocast dtype on this CPU (bfloat16 needs "
            "AVX-512, float16 AVX512-FP16/AMX-FP16): torch.lstm picks the oneDNN path")
    rows = [_result(skip, amp_dtype="bfloat16", op="torch.lstm", nodeid="t::a"),
            _result(skip, amp_dtype="float16", op="torch.lstm", nodeid="t::b"),
            _result("RuntimeError: expected scalar type Float but found 'BFloat16'",
                    amp_dtype="bfloat16", nodeid="t::c"),
            _result("RuntimeError: expected scalar type Float but found 'Half'",
                    amp_dtype="float16", nodeid="t::d"),
            _result("E: entry x is listed for float16 only", amp_dtype="bfloat16", nodeid="t::e"),
            _result("E: entry x is listed for bfloat16 only", amp_dtype="float16", nodeid="t::f"),
            _result("E: c10::Half, torch.half, at::kBFloat16, ScalarType::Half, bf16, fp16",
                    nodeid="t::g")]
    grouped = causes.group(rows)
    assert [r["count"] for r in grouped] == [2, 2, 2, 1], grouped
    assert grouped[0]["cause"] == (
        "oneDNN has no LSTM primitive for this autocast dtype on this CPU (<amp dtype> needs "
        "AVX-N, <amp dtype> AVX512-FP16/AMX-FP16): <op> picks the oneDNN path")
    assert grouped[1]["cause"] == ("RuntimeError: expected scalar type Float but found "
                                   "'<amp dtype>'")
    assert grouped[3]["cause"] == "E: " + ", ".join(["<amp dtype>"] * 6)
    assert causes.cause(_result("E: ComplexHalf and float32 stay")) == \
        "E: ComplexHalf and float32 stay"


def test_groups_are_largest_first_and_stable():
    rows = [_result("E: b", nodeid="t::b2"), _result("E: a", nodeid="t::a1"),
            _result("E: b", nodeid="t::b1"), {"nodeid": "t::ok", "outcome": "passed"},
            _result("E: c", nodeid="t::c1")]
    grouped = causes.group(rows)
    assert [(r["cause"], r["count"], r["items"]) for r in grouped] == [
        ("E: b", 2, ["t::b1", "t::b2"]), ("E: a", 1, ["t::a1"]), ("E: c", 1, ["t::c1"])]
    assert causes.group(list(reversed(rows))) == grouped
    assert causes.summary_line(grouped, shown=1) == "4 failures in 3 causes: 2 × E: b; …"


def test_the_report_and_the_terminal_group_failures_by_cause(pytester, monkeypatch):
    monkeypatch.setenv("AMP_CONFORMANCE_MUTANT", "mm-kept-fp32")
    report = pytester.path / "r.json"
    result = pytester.runpytest(*MUTANT, f"--conformance-report={report}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    data = json.loads(report.read_text())
    failures = data["causes"]["failures"]
    assert sum(r["count"] for r in failures) == data["summary"]["failed"]
    assert failures[0]["count"] >= failures[-1]["count"]
    policy = next(r for r in failures if "output dtype torch.float32, expected <amp dtype>"
                  in r["cause"])
    assert policy["count"] == 2 and all("torch_16-mm]" in n for n in policy["items"])
    assert "### Failures by cause" in report.with_suffix(".md").read_text()
    assert "Failures by cause" in report.with_suffix(".html").read_text()
    result.stdout.fnmatch_lines(["*amp-conformance: * failures in * causes, largest first*",
                                 "*2 × ConformanceFailure: <op> on cpu, autocast dtype <amp dtype>:"
                                 " <op> inside autocast: output dtype torch.float32, expected "
                                 "<amp dtype>"])


@pytest.mark.slow
def test_run_ends_with_the_causes(tmp_path):
    env = dict(os.environ, AMP_CONFORMANCE_MUTANT="mm-kept-fp32")
    proc = children.run([sys.executable, "-m", "amp_conformance", "run",
                           f"--report={tmp_path / 'r.json'}", "--", *MUTANT, "-q"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr
    assert last.startswith("amp-conformance run: completed, pytest exit status 1"), last
    assert " failures in " in last and " × ConformanceFailure: " in last, last


@pytest.mark.slow
def test_an_opt_in_tier_that_skips_everything_for_one_cause_fails(pytester):
    """--amp-compile on a device declaring no torch.compile: every compiled_policy item is
    skipped, most for that one cause (the rest not applicable: version bounds); the run
    fails naming it, the report says so."""
    caps = pytester.path / "caps.toml"
    caps.write_text('[capabilities]\ncompile = false\n[reasons]\ncompile = "no compiler yet"\n')
    report = pytester.path / "r.json"
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "--amp-compile", "eager",
                                f"--capabilities={caps}", "-k", "compiled_policy or "
                                "test_policy and torch_16-mm", f"--conformance-report={report}",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*SETUP ERROR: --amp-compile ran nothing: all * of its items "
                                 "were skipped, * of them for one cause: device declares no "
                                 "torch.compile support (no compiler yet) (* more for *"])
    data = json.loads(report.read_text())
    assert data["run"]["setup_errors"] and data["run"]["exitstatus"] == 4
    assert report.with_suffix(".md").read_text().count("SETUP ERROR: --amp-compile") == 1
    allowed = pytester.runpytest("--pyargs", "amp_conformance.suite", "--amp-compile", "eager",
                                 f"--capabilities={caps}", "-k", "compiled_policy or "
                                 "test_policy and torch_16-mm", "--amp-allow-empty",
                                 "-p", "no:cacheprovider")
    assert allowed.ret == pytest.ExitCode.OK


@pytest.mark.slow
def test_a_tier_that_ran_is_no_setup_error(pytester):
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "--amp-compile", "eager",
                                "-k", "compiled_policy and torch_16-mm", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    assert "SETUP ERROR" not in result.stdout.str()
