"""The vendor workflow: capabilities, expected failures, hooks, the conformance report,
``discover``, and the example PrivateUse1 backend (examples/fakegpu) run end to end.

The fakegpu backend registers a device, kernels and an autocast policy for the whole
process, so every run that imports it is a subprocess; everything else runs in-process
through pytester on the CPU device.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from amp_conformance import __main__ as cli
from amp_conformance.plugin import vendor
from amp_conformance.plugin.report import causes, render
from amp_conformance.plugin.report import journal as report
from amp_conformance.schema import oplist
from tests import children

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fakegpu"
ORACLE = ("--pyargs", "amp_conformance.suite.test_oplist")
CACHE = ("--pyargs", "amp_conformance.suite.test_cast_cache")

#: mm declared float32 on cpu: its policy check fails (mm runs in the autocast dtype)
WRONG_MM = """
[list]
device = "cpu"
[[entry]]
id = "mm"
op = "mm"
category = "torch_fp32"
override = true
args = [{shape = [8, 8]}, {shape = [8, 8]}]
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _outcomes(result) -> dict[str, int]:
    counts = result.parseoutcomes()
    names = {"errors": "error", "warnings": "warnings"}
    return {names.get(k, k): v for k, v in counts.items()}


# -- capabilities --------------------------------------------------------------------


def test_no_cast_cache_skips_its_checks_with_the_reason(pytester, tmp_path):
    caps = _write(tmp_path / "caps.toml", '[capabilities]\ncast_cache = false\n'
                  '[reasons]\ncast_cache = "autocast kernels registered from Python"\n')
    result = pytester.runpytest(*CACHE, f"--capabilities={caps}", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and "passed" not in outcomes
    result.stdout.fnmatch_lines(
        ["*device declares no cast cache (autocast kernels registered from Python)*"])


def test_declared_cast_cache_changes_nothing(pytester, tmp_path):
    caps = _write(tmp_path / "caps.toml", '[capabilities]\ncast_cache = true\n')
    result = pytester.runpytest(*CACHE, f"--capabilities={caps}")
    assert result.ret == 0 and "skipped" not in result.parseoutcomes()


def test_not_bitwise_compares_with_tolerances(pytester, tmp_path):
    caps = _write(tmp_path / "caps.toml", '[capabilities]\nbitwise = false\n')
    result = pytester.runpytest(*ORACLE, f"--capabilities={caps}", "-k", "numerics and torch_16-mm")
    result.stdout.fnmatch_lines(["*numerics close*"])
    result.assert_outcomes(passed=2)
    refused = pytester.runpytest(*ORACLE, f"--capabilities={caps}", "--numerics", "bitwise")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*not bitwise reproducible (*caps.toml)*drop --numerics bitwise*"])


def test_declared_amp_dtypes_restrict_the_run(pytester, tmp_path):
    caps = _write(tmp_path / "caps.toml", '[capabilities]\namp_dtypes = ["float16"]\n')
    result = pytester.runpytest(*ORACLE, f"--capabilities={caps}", "--collect-only", "-q")
    text = result.stdout.str()
    assert "cpu-float16-" in text and "cpu-bfloat16-" not in text
    refused = pytester.runpytest(*ORACLE, f"--capabilities={caps}", "--amp-dtype", "bfloat16")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*declares autocast dtypes float16 only (*caps.toml)*bfloat16*"])


@pytest.mark.parametrize("text, message", [
    ("[capabilities]\ncast_cache = \"no\"\n",
     "*caps.toml: field 'capabilities.cast_cache': expected true or false, got 'no'*"),
    ("[capabilities]\nfp8 = true\n", "*caps.toml: field 'capabilities.fp8': unknown capability*"),
    ("[capabilites]\ncast_cache = false\n", "*caps.toml: field 'capabilites': unknown key*"),
    ("[capabilities]\namp_dtypes = [\"float32\"]\n",
     "*field 'capabilities.amp_dtypes': expected a non-empty list of distinct dtypes*"),
    ("device = \"npu\"\n", "*caps.toml: field 'device': describes 'npu', but the run checks 'cpu'*"),
    ("[reasons]\ncast_cache = 3\n", "*field 'reasons.cast_cache': expected a non-empty string*"),
    ("[capabilities\ncast_cache = false\n", "*caps.toml: not valid TOML: *(at line 1, column *"),
    ("[capabilities]\nstep_boundary = \"torch_xla.sync\"\n",
     "*field 'capabilities.step_boundary': expected 'module:function'*got 'torch_xla.sync'*"),
    ("[capabilities]\nstep_boundary = \"no_such_backend:sync\"\n",
     "*caps.toml: field 'capabilities.step_boundary': 'no_such_backend:sync' cannot be "
     "resolved: ModuleNotFoundError*"),
    ("[capabilities]\nstep_boundary = \"torch:__version__\"\n",
     "*field 'capabilities.step_boundary': 'torch:__version__' is TorchVersion, not callable*"),
])
def test_bad_capabilities_file_names_file_and_field(pytester, tmp_path, text, message):
    caps = _write(tmp_path / "caps.toml", text)
    result = pytester.runpytest(*ORACLE, f"--capabilities={caps}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_declared_step_boundary_ends_every_training_step(pytester, tmp_path, monkeypatch):
    """A lazy device's step boundary runs where its training loop would cut the graph:
    after every step of the scaled run and of the control (and nowhere else)."""
    from amp_conformance.checks.gradscaler.training import TRAIN_STEPS
    from amp_conformance.core import sync

    calls = tmp_path / "calls"
    _write(tmp_path / "lazystep.py", f"def boundary():\n    with open({str(calls)!r}, 'a') as f:\n"
                                     "        f.write('.')\n")
    monkeypatch.syspath_prepend(tmp_path)
    caps = _write(tmp_path / "caps.toml", '[capabilities]\nstep_boundary = "lazystep:boundary"\n')
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_gradscaler",
                                f"--capabilities={caps}", "-k", "test_gradscaler_training and "
                                "sgd-plain-step")
    result.assert_outcomes(passed=1)
    assert calls.read_text() == "." * (2 * TRAIN_STEPS)
    assert sync.step_boundary("cpu") is None  # withdrawn with the run


def test_missing_capabilities_file(pytester, tmp_path):
    result = pytester.runpytest(*ORACLE, f"--capabilities={tmp_path / 'nope.toml'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*nope.toml: no such capabilities file*"])


# -- expected failures ---------------------------------------------------------------


def test_xfail_file_marks_known_failures_and_catches_stale_ones(pytester, tmp_path):
    wrong = _write(tmp_path / "wrong.toml", WRONG_MM)
    xfails = _write(tmp_path / "xfail.txt", "\n".join([
        "# known failures",
        "test_policy[cpu-bfloat16-torch_fp32-mm]   # mm declared fp32 on purpose",
        "test_policy[cpu-float16-torch_fp32-   # a prefix",
        "test_policy[cpu-bfloat16-torch_16-bmm]   # passes: a stale entry",
        "test_policy[cpu-bfloat16-torch_16-no_such_op]",
        "",
    ]))
    result = pytester.runpytest(*ORACLE, f"--oplist={wrong}", f"--xfail-file={xfails}", "-rxX",
                                "-k", "test_policy and (torch_fp32-mm or bfloat16-torch_16-bmm)")
    result.assert_outcomes(xfailed=2, failed=1)
    for line in ("*XFAIL*test_policy[[]cpu-bfloat16-torch_fp32-mm[]]*mm declared fp32 on purpose "
                 "[[]*xfail.txt:2[]]*",
                 "*XFAIL*test_policy[[]cpu-float16-torch_fp32-mm[]]*a prefix [[]*xfail.txt:3[]]*",
                 "*[[]XPASS(strict)[]] passes: a stale entry*"):
        result.stdout.fnmatch_lines([line])
    # the line that matches nothing: a warning and a line of the terminal summary
    result.stdout.fnmatch_lines([
        "*AmpConformanceWarning: expected failure 'test_policy[[]cpu-bfloat16-torch_16-no_such_op[]]'"
        " (*xfail.txt:5) matches no test of this run*",
        "*amp-conformance: expected failures that match no test*",
        "*xfail.txt:5: test_policy[[]cpu-bfloat16-torch_16-no_such_op[]]",
    ])
    # lines matching only deselected items are not reported as unmatched
    assert "xfail.txt:4:" not in result.stdout.str()


def test_xfail_file_matches_node_id_prefixes(pytester, tmp_path):
    xfails = _write(tmp_path / "xfail.txt", "test_oplist.py::test_policy[cpu-bfloat16-torch_fp32-  # fp32\n")
    wrong = _write(tmp_path / "wrong.toml", WRONG_MM)
    result = pytester.runpytest(*ORACLE, f"--oplist={wrong}", f"--xfail-file={xfails}",
                                "-k", "test_policy and torch_fp32-mm")
    result.assert_outcomes(xfailed=1, failed=1)


@pytest.mark.parametrize("text, message", [
    ("test_policy[a] test_policy[b]\n", "*xfail.txt:1: expected one test id or node-id prefix per line*"),
    ("# c\ntest_policy[a]\ntest_policy[a]  # again\n",
     "*xfail.txt:3: 'test_policy[[]a[]]' is already listed on line 2*"),
])
def test_bad_xfail_file_names_file_and_line(pytester, tmp_path, text, message):
    xfails = _write(tmp_path / "xfail.txt", text)
    result = pytester.runpytest(*ORACLE, f"--xfail-file={xfails}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_missing_xfail_file(pytester, tmp_path):
    result = pytester.runpytest(*ORACLE, f"--xfail-file={tmp_path / 'none.txt'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*none.txt: no such expected-failures file*"])


def test_expectation_matching_rules():
    ids = ["test_policy[cpu-bfloat16-torch_16-mm]",
           "::test_policy[cpu-bfloat16-torch_16-mm]",  # pytest's node id under --pyargs module
           "amp_conformance/suite/test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm]",
           "test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm]"]
    for pattern in ("test_policy[cpu-bfloat16-", "test_policy[cpu-bfloat16-torch_16-mm]",
                    "amp_conformance/suite/test_oplist.py::", "test_oplist.py::test_policy[cpu-b"):
        assert vendor.Expectation(pattern, "r", "x.txt", 1).matches(ids), pattern
    for pattern in ("test_policy[cpu-float16-", "test_cast_cache.py::", "mm]"):
        assert not vendor.Expectation(pattern, "r", "x.txt", 1).matches(ids), pattern


# -- hooks ---------------------------------------------------------------------------


def test_hooks_supply_capabilities_oplists_and_expected_failures(pytester, tmp_path):
    wrong = _write(tmp_path / "wrong.toml", WRONG_MM)
    xfails = _write(tmp_path / "xfail.txt", "test_policy[cpu-bfloat16-torch_fp32-mm]  # from a hook\n")
    seen = tmp_path / "setup.txt"
    pytester.makeconftest(f"""
        from pathlib import Path

        def pytest_amp_conformance_setup(config, device):
            Path({str(seen)!r}).write_text(device)

        def pytest_amp_conformance_capabilities(config, device):
            return {{"capabilities": {{"cast_cache": False, "amp_dtypes": ["bfloat16"]}},
                    "reasons": {{"cast_cache": "said a hook"}}}}

        def pytest_amp_conformance_oplists(config, device):
            return [{str(wrong)!r}]

        def pytest_amp_conformance_xfail_files(config, device):
            return [{str(xfails)!r}]
    """)
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_oplist",
                                "amp_conformance.suite.test_cast_cache", "-rsx",
                                "-k", "test_policy and torch_fp32-mm or weight_cast_once")
    result.assert_outcomes(xfailed=1, skipped=1)
    result.stdout.fnmatch_lines(["*device declares no cast cache (said a hook)*",
                                 "*XFAIL*cpu-bfloat16-torch_fp32-mm*from a hook*"])
    assert seen.read_text() == "cpu"


def test_command_line_capabilities_win_over_hooks(pytester, tmp_path):
    pytester.makeconftest("""
        def pytest_amp_conformance_capabilities(config, device):
            return {"capabilities": {"cast_cache": False}}
    """)
    caps = _write(tmp_path / "caps.toml", '[capabilities]\ncast_cache = true\n')
    result = pytester.runpytest(*CACHE, f"--capabilities={caps}", "-k", "weight_cast_once")
    result.assert_outcomes(passed=2)


def test_malformed_hook_result_is_a_usage_error(pytester):
    pytester.makeconftest("""
        def pytest_amp_conformance_capabilities(config, device):
            return {"capabilities": {"cast_cache": "maybe"}}
    """)
    result = pytester.runpytest(*ORACLE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*hook pytest_amp_conformance_capabilities: field 'capabilities.cast_cache': expected true*"])


def test_backend_module_that_cannot_be_imported(pytester):
    result = pytester.runpytest(*ORACLE, "--backend-module", "no_such_backend_xyz")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--backend-module no_such_backend_xyz: cannot import it*"])


# -- the report ----------------------------------------------------------------------


def _load(path: Path) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema"] == report.SCHEMA
    return data


SUMMARY_KEYS = {"passed", "failed", "skipped", "xfailed", "xpassed", "error", "not_applicable",
                "unfinished", "quarantined"}
RESULT_KEYS = {"nodeid", "test", "check", "param", "amp_dtype", "category", "entry", "op",
               "outcome", "seconds", "message", "observed", "defect"}


def _assert_agrees(data: dict, outcomes: dict[str, int]) -> None:
    """The report's summary is pytest's own count; results and categories add up; the run
    completed, so no item is unfinished."""
    assert data["run"]["status"] == "completed" and data["summary"]["unfinished"] == 0
    for key in ("passed", "failed", "skipped", "xfailed", "xpassed", "error"):
        assert data["summary"][key] == outcomes.get(key, 0), (key, data["summary"], outcomes)
    by_outcome: dict[str, int] = {}
    for r in data["results"]:
        by_outcome[r["outcome"]] = by_outcome.get(r["outcome"], 0) + 1
    for key in ("passed", "failed", "skipped", "xfailed", "xpassed"):
        assert by_outcome.get(key, 0) == data["summary"][key]
    na = sum(1 for r in data["results"] if r["outcome"] == "skipped"
             and (r["message"] or "").startswith("not applicable"))
    assert na == data["summary"]["not_applicable"]
    for name, row in data["categories"].items():
        items = [r for r in data["results"] if r["category"] == name]
        outcomes = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")
        assert sum(row[k] for k in outcomes) == len(items)


def test_report_json_html_markdown(pytester, tmp_path):
    wrong = _write(tmp_path / "wrong.toml", WRONG_MM)
    xfails = _write(tmp_path / "xfail.txt", "test_policy[cpu-float16-torch_fp32-mm]  # known\n")
    out = tmp_path / "out" / "cpu.json"
    result = pytester.runpytest(
        "--pyargs", "amp_conformance.suite.test_oplist", "amp_conformance.suite.test_regions",
        f"--oplist={wrong}", f"--xfail-file={xfails}", f"--conformance-report={out}",
        "-k", "mm or regions or legacy and torch_16-addmm")
    outcomes = _outcomes(result)
    assert outcomes["failed"] >= 1 and outcomes["xfailed"] == 1
    result.stdout.fnmatch_lines([f"amp-conformance report: {out}, {out.with_suffix('.html')}, "
                                 f"{out.with_suffix('.md')}"])
    data = _load(out)
    _assert_agrees(data, outcomes)
    assert set(data["summary"]) == SUMMARY_KEYS
    assert data["device"] == "cpu" and data["fake"] is False and data["numerics"] == "bitwise"
    assert data["amp_dtypes"] == ["bfloat16", "float16"]
    assert data["torch"] == torch.__version__
    assert data["options"]["oplists"] == [str(wrong)]
    assert data["options"]["xfail_files"] == [str(xfails)]
    assert data["options"]["capabilities"]["cast_cache"] is True
    assert all(set(r) == RESULT_KEYS for r in data["results"])
    by_id = {r["nodeid"].split("::")[-1]: r for r in data["results"]}
    failed = by_id["test_policy[cpu-bfloat16-torch_fp32-mm]"]
    assert failed["outcome"] == "failed" and failed["check"] == "policy"
    assert (failed["category"], failed["entry"], failed["op"], failed["amp_dtype"]) == \
        ("torch_fp32", "mm", "torch.mm", "bfloat16")
    assert failed["param"] == "cpu-bfloat16-torch_fp32-mm" and failed["test"] == "test_policy"
    assert "torch.mm" in failed["message"] and "expected torch.float32" in failed["message"]
    assert failed["observed"] == {"torch.mm": ["bfloat16"], "Tensor.mm": ["bfloat16"]}
    xfailed = by_id["test_policy[cpu-float16-torch_fp32-mm]"]
    assert xfailed["outcome"] == "xfailed" and xfailed["message"].startswith("known [")
    legacy = by_id["test_legacy[cpu-bfloat16-torch_16-addmm]"]
    assert legacy["outcome"] == "passed" and legacy["message"] is None and legacy["observed"] is None
    region = next(r for r in data["results"] if r["check"] == "regions")
    assert region["category"] is None and region["amp_dtype"] in ("bfloat16", "float16")
    assert data["categories"]["torch_fp32"]["failed"] == 5  # policy bfloat16; numerics, backward both
    fp32 = data["categories"]["torch_fp32"]
    assert fp32["pass_rate"] == round(fp32["passed"] / (fp32["passed"] + fp32["failed"]), 4)

    html = out.with_suffix(".html").read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>") and "<script src" not in html and "<link" not in html
    cells = re.findall(r'<td class="cell (\w+)"', html)
    assert len([c for c in cells if c != "none"]) == len(data["results"])
    assert cells.count("fail") == data["summary"]["failed"]
    assert cells.count("xfail") == data["summary"]["xfailed"]
    assert "expected torch.float32" in html  # the failure message, in a tooltip and a details block
    md = out.with_suffix(".md").read_text(encoding="utf-8")
    assert md.startswith("## Autocast conformance: cpu")
    assert f"**{data['summary']['passed']} passed**" in md
    assert "`" + failed["nodeid"] + "` (failed)" in md


def _verdicts(data: dict) -> list[dict]:
    """Each item's verdict: every field of its result, its message read as its cause (numbers
    masked). Two runs with other thread counts sum in another order, so the numbers a
    message quotes (a greatest relative difference) may differ where the verdict does not;
    an item's time is no part of its verdict."""
    return [{**{k: v for k, v in r.items() if k not in ("message", "seconds")},
             "cause": causes.cause(r)} for r in data["results"]]


def _untimed(rows: dict) -> dict:
    """Per-category (or family) counts without the items' time, which no two runs share."""
    return {name: {k: v for k, v in row.items() if k != "seconds"} for name, row in rows.items()}


def test_report_path_must_be_json(pytester, tmp_path):
    result = pytester.runpytest(*ORACLE, f"--conformance-report={tmp_path / 'r.html'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--conformance-report *r.html: expected a path ending in .json*"])


@pytest.mark.slow
def test_report_under_xdist_equals_serial(pytester, tmp_path):
    wrong = _write(tmp_path / "wrong.toml", WRONG_MM)
    args = ("--pyargs", "amp_conformance.suite.test_oplist", "amp_conformance.suite.test_eligibility",
            f"--oplist={wrong}", "-k", "mm or eligibility", "-p", "no:randomly")
    serial = pytester.runpytest(*args, f"--conformance-report={tmp_path / 's.json'}")
    parallel = pytester.runpytest_subprocess(*args, "-n", "2",
                                             f"--conformance-report={tmp_path / 'p.json'}")
    a, b = _load(tmp_path / "s.json"), _load(tmp_path / "p.json")
    _assert_agrees(a, _outcomes(serial))
    _assert_agrees(b, _outcomes(parallel))
    assert a["summary"] == b["summary"]
    assert _untimed(a["categories"]) == _untimed(b["categories"])
    assert _untimed(a["families"]) == _untimed(b["families"])
    assert _verdicts(a) == _verdicts(b)
    assert any(r["observed"] for r in b["results"])  # user properties travelled from workers


def test_render_handles_an_empty_run():
    data = {"schema": report.SCHEMA, "torch": "x", "python": "y", "device": "cpu", "fake": False,
            "amp_dtypes": [], "numerics": "bitwise", "options": {}, "categories": {}, "results": [],
            "summary": dict.fromkeys(SUMMARY_KEYS, 0)}
    assert "No op-list items" in render.render_html(data)
    assert "pass rate **—**" in render.render_markdown(data)


# -- discover ------------------------------------------------------------------------


def test_discover_cpu_against_its_own_lists(tmp_path, capsys):
    out = tmp_path / "cpu.toml"
    assert cli.main(["discover", "--device", "cpu", "--reference", "cpu", "--out", str(out),
                     "--amp-dtype", "bfloat16", "--diff", str(tmp_path / "diff.md")]) == 0
    summary = capsys.readouterr().out
    assert re.search(r"discover: (\d+) entries of the cpu lists on cpu: \1 same, 0 differ", summary)
    parsed = oplist.parse_file(out)
    assert parsed.device == "cpu" and len(parsed.entries) > 100
    mm = next(e for e in parsed.entries if e.id == "mm")
    assert mm.policy == "lower" and "observed lower" in mm.note
    assert "0 differ" in (tmp_path / "diff.md").read_text()


def test_discover_fake_cuda_and_xpu_against_cuda(tmp_path, capsys):
    assert cli.main(["discover", "--device", "cuda", "--fake", "--out", str(tmp_path / "c.toml"),
                     "-q", "--amp-dtype", "float16"]) == 0
    found = re.search(r"entries of the cuda lists on cuda: (\d+) same, 0 differ, (\d+) not run",
                      capsys.readouterr().out)
    assert found
    # a CUDA build without a GPU (the matrix's older releases) reaches the driver from the
    # convolution's and attention's backend choice: those alone are not run, saying so
    not_run = re.findall(r"^# (\S+) \(.*raises outside autocast too: (.*)$",
                         (tmp_path / "c.toml").read_text(), re.M)
    assert len(not_run) == int(found.group(2))
    if torch.version.cuda is None:
        assert not not_run
    assert all(re.search(r"NVIDIA driver|CUDA driver", why) for _, why in not_run), not_run
    # mps departs from cuda's policy (upsample_* run as they come, no ban, ...)
    assert cli.main(["discover", "--device", "mps", "--fake", "--out", str(tmp_path / "m.toml"),
                     "--amp-dtype", "float16"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"\| binary_cross_entropy \| `torch._C._nn.binary_cross_entropy` \| error \| "
                     r"unchanged", text)
    banned = {e.id: e for e in oplist.parse_file(tmp_path / "m.toml").entries}["binary_cross_entropy"]
    # a departure is a review item: cuda's expectation stays active, mps's behaviour is commented
    assert banned.policy == "banned" and banned.note.startswith("REVIEW: mps departs from cuda")
    assert "# REVIEW binary_cross_entropy: mps departs from cuda" in (tmp_path / "m.toml").read_text()


def test_discover_bad_input(capsys, tmp_path, absent_device):
    assert cli.main(["discover", "--device", "tpu", "--out", str(tmp_path / "x.toml")]) == 2
    assert "unknown autocast device type 'tpu'" in capsys.readouterr().err
    assert cli.main(["discover", "--device", absent_device, "--out", str(tmp_path / "x.toml")]) == 2
    assert "add --fake" in capsys.readouterr().err


# -- the example backend, end to end (subprocesses) ------------------------------------


def _example(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTEST_ADDOPTS", None)
    return children.run([sys.executable, *args], cwd=EXAMPLE, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def _summary_counts(stdout: str) -> dict[str, int]:
    line = stdout.strip().splitlines()[-1]
    counts = {}
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)", line):
        counts["error" if word.startswith("error") else word] = int(n)
    return counts


needs_python_backend = pytest.mark.skipif(
    not hasattr(torch.library, "get_kernel") or not hasattr(torch._C, "_acc"),
    reason="the example backend needs torch.library.get_kernel and torch._C._acc (Python device guard)",
)


@needs_python_backend
def test_fakegpu_is_a_privateuse1_device():
    script = """
import torch, fakegpu_backend
a = torch.randn(4, 4).to("fakegpu")
assert type(a) is torch.Tensor and a.device == torch.device("fakegpu", 0), a.device
keys = str(torch._C._dispatch_keys(a))
assert "PrivateUse1" in keys and "AutocastPrivateUse1" in keys and "Python" not in keys, keys
v = a.t(); v.mul_(0)
assert a.cpu().abs().sum().item() == 0  # a view shares the memory
w = torch.randn(4, 4).to("fakegpu").requires_grad_()
(w * 3).sum().backward()
assert w.grad.device.type == "fakegpu" and torch.equal(w.grad.cpu(), torch.full((4, 4), 3.0))
with torch.autocast("fakegpu"):
    got = (torch.mm(a, a).dtype, torch.softmax(a.half(), 0).dtype, torch.cat([a.half(), a]).dtype,
           torch.mm(a.cpu(), a.cpu()).dtype)
assert got == (torch.float16, torch.float32, torch.float32, torch.float32), got
print("ok")
"""
    done = _example("-c", script, timeout=300)
    if (done.returncode == -6 and done.stdout.strip() == "ok"
            and "terminate called without an active exception" in done.stderr):
        # Every check above passed; the process then aborted in torch's own teardown (a C++
        # thread still joinable at exit). Seen once, in CI under load (1 of 5 clean-clone
        # runs; 0 of 30 here): reported as what it is, never as a pass.
        pytest.xfail("every check passed; the interpreter then aborted at exit in torch's "
                     "teardown (terminate called without an active exception)")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


@pytest.mark.slow
@needs_python_backend
def test_fakegpu_passes_with_its_declarations(tmp_path):
    out = tmp_path / "fakegpu.json"
    done = _example("-m", "pytest", "-p", "no:randomly", f"--conformance-report={out}", "-rsx")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    counts = _summary_counts(done.stdout)
    # 4 declared (conv2d) + the compile tier's strict xfails of known PyTorch defects
    assert counts.get("failed", 0) == 0 and counts["xfailed"] >= 4 and counts["passed"] > 100
    assert "device declares no cast cache (autocast is registered from Python" in done.stdout
    data = _load(out)
    _assert_agrees(data, counts)
    assert data["device"] == "fakegpu" and data["options"]["backend_modules"] == ["fakegpu_backend"]
    assert data["options"]["capabilities"]["cast_cache"] is False
    assert data["options"]["capabilities"]["sources"]["cast_cache"] == "capabilities.toml"
    assert any(p.endswith("fakegpu.toml") for p in data["options"]["oplists"])
    conv2d = [r for r in data["results"] if r["entry"] == "conv2d" and r["outcome"] == "xfailed"]
    assert len(conv2d) == 6 and all("xfail.txt:" in r["message"] for r in conv2d)
    mm = next(r for r in data["results"] if r["nodeid"].endswith("test_policy[fakegpu-float16-torch_16-mm]"))
    assert mm["observed"] == {"torch.mm": ["float16"], "Tensor.mm": ["float16"]}


@pytest.mark.slow
@needs_python_backend
def test_fakegpu_without_its_mm_kernel_fails_naming_the_op():
    done = _example("-m", "pytest", "-p", "no:randomly", "--pyargs", "amp_conformance.suite.test_oplist",
                    "-k", "torch_16-mm", env={"FAKEGPU_DROP_AUTOCAST": "mm"})
    assert done.returncode == 1, done.stdout[-3000:]
    assert re.search(r"FAILED \S*test_policy\[fakegpu-float16-torch_16-mm\]", done.stdout)
    assert re.search(r"torch\.mm \[entry mm, category torch_16, .*fakegpu\.toml\] on fakegpu, "
                     r"autocast dtype torch\.float16:\nE\s+torch\.mm inside autocast: output dtype "
                     r"torch\.float32, expected torch\.float16", done.stdout)


@pytest.mark.slow
@needs_python_backend
def test_fakegpu_with_a_wrong_declared_policy_fails_naming_the_op(tmp_path):
    wrong = _write(tmp_path / "wrong.toml", """
[list]
device = "fakegpu"
[[entry]]
id = "softmax"
op = "softmax"
category = "torch_16"
override = true
args = [{shape = [8], dtype = "float32"}, 0]
""")
    done = _example("-m", "pytest", "-p", "no:randomly", "--pyargs", "amp_conformance.suite.test_oplist",
                    f"--oplist={wrong}", "-k", "softmax")
    assert done.returncode == 1, done.stdout[-3000:]
    assert re.search(r"FAILED \S*test_policy\[fakegpu-bfloat16-torch_16-softmax\]", done.stdout)
    assert "torch.softmax inside autocast: output dtype torch.float32, expected torch.bfloat16" in done.stdout


@pytest.mark.slow
@needs_python_backend
def test_fakegpu_report_under_xdist(tmp_path):
    serial, parallel = tmp_path / "s.json", tmp_path / "p.json"
    args = ("-m", "pytest", "-p", "no:randomly", "--pyargs", "amp_conformance.suite.test_oplist",
            "amp_conformance.suite.test_cast_cache")
    one = _example(*args, f"--conformance-report={serial}")
    two = _example(*args, "-n", "2", f"--conformance-report={parallel}")
    assert one.returncode == 0 and two.returncode == 0, two.stdout[-3000:]
    a, b = _load(serial), _load(parallel)
    _assert_agrees(a, _summary_counts(one.stdout))
    _assert_agrees(b, _summary_counts(two.stdout))
    assert _verdicts(a) == _verdicts(b) and a["summary"] == b["summary"]


@pytest.mark.slow
@needs_python_backend
def test_discover_on_fakegpu_shows_where_it_departs_from_cuda(tmp_path):
    out = tmp_path / "fakegpu.toml"
    done = _example("-m", "amp_conformance", "discover", "--device", "fakegpu", "--backend-module",
                    "fakegpu_backend", "--out", str(out), "--amp-dtype", "float16")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| conv2d | `torch.conv2d` | lower | unchanged (float32)" in done.stdout
    entries = {e.id: e for e in oplist.parse_file(out).entries}
    assert entries["mm"].policy == "lower" and entries["softmax"].policy == "fp32"
    # departures are review items: cuda's expectation stays active, so they fail until reviewed
    review = {i for i, e in entries.items() if e.note.startswith("REVIEW:")}
    assert {"conv2d", "acos"} <= review and entries["conv2d"].policy == "lower"
    report = tmp_path / "r.json"
    run = _example("-m", "pytest", "--noconftest", "-p", "no:randomly", f"--oplist={out}",
                   "--pyargs", "amp_conformance.suite.test_oplist", "-k", "test_policy", "-rf",
                   f"--conformance-report={report}")
    failed = set(re.findall(r"FAILED \S*test_policy\[fakegpu-float16-\w+-([^\]]+)\]", run.stdout))
    assert run.returncode == 1 and failed and failed <= review, run.stdout[-3000:]
    # with the review items left out, the discovered list passes on the device it describes:
    # each other item of the same run passed (or skipped, or failed as declared)
    others = [r for r in _load(report)["results"] if r["entry"] not in review]
    assert others and all(r["outcome"] in ("passed", "skipped", "xfailed") for r in others), [
        (r["nodeid"], r["outcome"], (r["message"] or "")[:200]) for r in others
        if r["outcome"] not in ("passed", "skipped", "xfailed")]


@pytest.mark.slow
@needs_python_backend
def test_coverage_and_the_suite_say_what_a_vendor_device_lacks():
    """Without --backend-module the device is unknown: say to pass it; without an op list
    there is nothing to cover or check: say to pass --oplist (coverage exits 2, the suite
    is a usage error)."""
    unknown = _example("-m", "amp_conformance", "coverage", "--device", "fakegpu")
    assert unknown.returncode == 2 and "pass --backend-module MODULE" in unknown.stderr, unknown.stderr
    no_list = _example("-m", "amp_conformance", "coverage", "--device", "fakegpu",
                       "--backend-module", "fakegpu_backend")
    assert no_list.returncode == 2, no_list.stdout[-2000:]
    assert ("error: no op list describes device 'fakegpu', so nothing covers its policy: pass "
            "--oplist PATH with a list whose [list] device = \"fakegpu\"") in no_list.stderr
    listed = _example("-m", "amp_conformance", "coverage", "--device", "fakegpu",
                      "--backend-module", "fakegpu_backend", "--oplist", "fakegpu.toml", "-q")
    assert listed.returncode == 0 and "coverage fakegpu: 15/15 covered" in listed.stdout, listed.stdout
    suite = _example("-m", "pytest", "--noconftest", "--pyargs", "amp_conformance.suite.test_oplist")
    assert suite.returncode == pytest.ExitCode.USAGE_ERROR, suite.stdout[-2000:]
    assert "nothing to check on device 'fakegpu': no op list describes it; pass --oplist PATH" \
        in suite.stderr
