"""The plugin's options, ids and failure modes, run through pytester."""

import re

import pytest

SUITE = ("--pyargs", "amp_conformance.suite.test_oplist")
ID = re.compile(r"(test_\w+\[[^\]]+\])")


def _ids(lines):
    return sorted({m.group(1) for line in lines for m in [ID.search(line)] if m})


def test_ids_are_readable_and_stable(pytester):
    first = pytester.runpytest(*SUITE, "--collect-only", "-q")
    second = pytester.runpytest(*SUITE, "--collect-only", "-q")
    ids = _ids(first.outlines)
    assert "test_policy[cpu-bfloat16-torch_16-mm]" in ids
    assert "test_numerics[cpu-float16-nn_fp32-mse_loss]" in ids
    assert ids == _ids(second.outlines)


def test_k_selects_by_id(pytester):
    result = pytester.runpytest(*SUITE, "-k", "policy and bfloat16 and torch_16-mm", "-q")
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_xdist_runs_the_same_items(pytester):
    """What two workers run is what a serial run collects (and so runs, every item)."""
    serial = pytester.runpytest(*SUITE, "--collect-only", "-q", "-p", "no:randomly")
    parallel = pytester.runpytest_subprocess(*SUITE, "-v", "-n", "2")
    assert parallel.ret == 0, parallel.stdout.str()[-2000:]
    assert _ids(serial.outlines) == _ids(parallel.outlines)
    assert len(_ids(serial.outlines)) > 400


@pytest.mark.slow
def test_a_clean_run_warns_of_nothing_in_the_suite(pytester, expecttest_installed):
    """Every plugin module is imported by pytest itself (``pytest_plugins``), before any
    other module imports it, so pytest can rewrite it: no "Module already imported"."""
    result = pytester.runpytest_subprocess(*SUITE, "--collect-only", "-q", "--amp-opinfo")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert "PytestAssertRewriteWarning" not in result.stdout.str() + result.stderr.str()


def test_unavailable_device_fails_the_run(pytester, absent_device):
    result = pytester.runpytest(*SUITE, "--device", absent_device)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*device '{absent_device}' is not available here*--fake*"])
    assert "passed" not in result.stdout.str()


def test_unknown_device_names_what_is_allowed(pytester):
    result = pytester.runpytest(*SUITE, "--device", "tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown autocast device type 'tpu'*knows: cpu, cuda*"])


def test_bad_amp_dtype_and_numerics(pytester):
    result = pytester.runpytest(*SUITE, "--amp-dtype", "float32")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*allowed: bfloat16 (bf16), float16*"])
    result = pytester.runpytest(*SUITE, "--numerics", "roughly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice: 'roughly'*"])


def test_amp_dtype_selects_and_close_numerics_pass(pytester):
    result = pytester.runpytest(*SUITE, "--amp-dtype", "bf16", "--numerics", "close", "-q")
    outcomes = result.parseoutcomes()
    assert result.ret == 0 and outcomes["passed"] > 150
    assert "cpu-float16-" not in result.stdout.str()  # "cpu-bfloat16-" contains "float16-"


def test_host_project_keeps_its_own_device_option(pytester):
    """A host whose conftest defines --device keeps it; ours stays as --amp-device."""
    pytester.makeconftest(
        """
        def pytest_addoption(parser):
            parser.addoption("--device", default="host-default")
        """
    )
    pytester.makepyfile(
        test_host="""
        def test_host_option(request):
            assert request.config.getoption("--device") == "gpu0"
            assert request.config.getoption("amp_device") == "cpu"
        """
    )
    result = pytester.runpytest("--device", "gpu0", "--amp-device", "cpu", "test_host.py", "-q")
    result.assert_outcomes(passed=1)


def test_markers_are_registered(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*amp_check(name)*", "*amp_needs_values*"])


def test_oplist_for_another_device_is_refused(pytester, tmp_path):
    other = tmp_path / "npu.toml"
    other.write_text('[list]\ndevice = "npu"\n')
    result = pytester.runpytest(*SUITE, "--oplist", str(other))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*describes another device than 'cpu'*"])


def test_malformed_extra_oplist_is_a_usage_error(pytester, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[list]\ndevice = "cpu"\n[[entry]]\nid = "x"\nop = "mm"\ncategory = "nope"\n')
    result = pytester.runpytest(*SUITE, "--oplist", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad.toml: entry 'x': field 'category': unknown value 'nope'*"])


def test_extra_oplist_adds_items(pytester, tmp_path):
    extra = tmp_path / "vendor.toml"
    extra.write_text(
        '[list]\ndevice = "cpu"\n[[entry]]\nid = "vendor-mm"\nop = "mm"\ncategory = "torch_16"\n'
        'args = [{shape = [4, 4]}, {shape = [4, 4]}]\n'
    )
    result = pytester.runpytest(*SUITE, "--oplist", str(extra), "-k", "vendor-mm", "-q")
    result.assert_outcomes(passed=10)  # 5 per-entry checks x 2 dtypes
