"""Every bad input is one line naming the file, option, hook or field and what is allowed.

Never a traceback, never a silent misbehaviour, never a misleading exit status (issue #11):
a pytest option problem is a usage error (exit 4), a subcommand's bad input exits 2 with
``error: ...`` on stderr. Each test asserts the exit status and that the message is a
single line naming what is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_conformance import __main__ as cli
from amp_conformance.core import devices
from amp_conformance.core.target import fake_supported
from amp_conformance.plugin.report.paths import validate_report_path
from amp_conformance.schema.oplist import builtin_devices
from amp_conformance.tools import drift

ORACLE = ("--pyargs", "amp_conformance.suite.test_oplist", "--collect-only", "-q")
CPU_LIST = ('[list]\ndevice = "cpu"\n[[entry]]\nid = "vendor-mm"\nop = "mm"\n'
            'category = "torch_16"\nargs = [{shape = [4, 4]}, {shape = [4, 4]}]\n')


def _usage_line(result, *fragments: str) -> str:
    """The run's one error line: exit 4, no traceback, every fragment in that line."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    err = result.stderr.str()
    assert "Traceback" not in err and "INTERNALERROR" not in result.stdout.str() + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: amp-conformance: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def _cli_line(capsys, argv: list[str], *fragments: str) -> str:
    """A subcommand's one error line: exit 2, ``error: ...`` on stderr, nothing on stdout."""
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out[-2000:], err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and out == "", (out, err)
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def bad_files(tmp_path) -> dict[str, Path]:
    """A directory and a file that is not UTF-8, each given where a text file is expected."""
    directory = tmp_path / "a_directory"
    directory.mkdir()
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    return {"directory": directory, "binary": binary}


# -- 1. --capabilities / --xfail-file: a directory or a file that is not UTF-8 -----------


@pytest.mark.parametrize("option, what", [("--capabilities", "a capabilities file"),
                                          ("--xfail-file", "an expected-failures file")])
def test_declaration_file_that_is_a_directory(pytester, bad_files, option, what):
    path = bad_files["directory"]
    result = pytester.runpytest(*ORACLE, f"{option}={path}")
    _usage_line(result, f"{path}: is a directory, not {what}")


@pytest.mark.parametrize("option, what", [("--capabilities", "a capabilities file"),
                                          ("--xfail-file", "an expected-failures file")])
def test_declaration_file_that_is_not_utf8(pytester, bad_files, option, what):
    path = bad_files["binary"]
    result = pytester.runpytest(*ORACLE, f"{option}={path}")
    _usage_line(result, f"{path}: not UTF-8 text", f"{what} is")


# -- 2. --backend-module that raises, or exits ----------------------------------------


def test_backend_module_that_raises(pytester):
    pytester.makepyfile(nodriver_backend='raise RuntimeError("no driver")\n')
    pytester.syspathinsert()
    result = pytester.runpytest(*ORACLE, "--backend-module", "nodriver_backend")
    _usage_line(result, "--backend-module nodriver_backend: importing it raised "
                        "RuntimeError: no driver")


@pytest.mark.slow
def test_backend_module_that_calls_sys_exit(pytester):
    # a subprocess: a sys.exit that escaped would end an in-process run with it
    pytester.makepyfile(exiting_backend="import sys\nsys.exit(3)\n")
    result = pytester.runpytest_subprocess(*ORACLE, "--backend-module", "exiting_backend")
    _usage_line(result, "--backend-module exiting_backend: importing it called sys.exit(3)")


def test_setup_hook_that_raises_names_the_hook_and_plugin(pytester):
    conftest = pytester.makeconftest("""
        def pytest_amp_conformance_setup(config, device):
            raise RuntimeError("no driver")
    """)
    result = pytester.runpytest(*ORACLE)
    _usage_line(result, f"{conftest}: hook pytest_amp_conformance_setup: raised "
                        "RuntimeError: no driver")


# -- 3. hooks returning the wrong type ------------------------------------------------


@pytest.mark.parametrize("hook, returned, expected", [
    ("pytest_amp_conformance_oplists", "'vendor.toml'", "returned str 'vendor.toml'; expected "
                                                        "a list of paths"),
    ("pytest_amp_conformance_xfail_files", "'xfail.txt'", "returned str 'xfail.txt'; expected "
                                                          "a list of paths"),
    ("pytest_amp_conformance_oplists", "['ok.toml', 3]", "element 1 of the returned list is "
                                                         "int 3; expected a path"),
    ("pytest_amp_conformance_xfail_files", "[None]", "element 0 of the returned list is "
                                                     "NoneType None; expected a path"),
    ("pytest_amp_conformance_capabilities", "['cast_cache']", "returned list ['cast_cache']; "
                                                              "expected a dict"),
    ("pytest_amp_conformance_capabilities", "'caps.toml'", "returned str 'caps.toml'; "
                                                           "expected a dict"),
])
def test_hook_result_of_the_wrong_type(pytester, hook, returned, expected):
    conftest = pytester.makeconftest(f"""
        def {hook}(config, device):
            return {returned}
    """)
    result = pytester.runpytest(*ORACLE)
    _usage_line(result, f"{conftest}: hook {hook}: {expected}")


def test_hook_paths_still_work(pytester, tmp_path):
    extra = tmp_path / "vendor.toml"
    extra.write_text(CPU_LIST, encoding="utf-8")
    pytester.makeconftest(f"""
        from pathlib import Path
        def pytest_amp_conformance_oplists(config, device):
            return (Path({str(extra)!r}),)
    """)
    result = pytester.runpytest(*ORACLE[:2], "-k", "vendor-mm", "-q")
    result.assert_outcomes(passed=10)  # policy, numerics, outside, legacy, backward x 2 dtypes


# -- 4. a device with autocast kernels but no op list ---------------------------------


def _device_without_a_list() -> str:
    known = [d for d in devices.known_device_types() if d not in builtin_devices()]
    usable = [d for d in known if devices.is_autocast_available(d) and fake_supported(d)]
    if not usable:
        pytest.skip("this torch registers autocast kernels for no device without a list")
    return usable[0]


@pytest.mark.slow
@pytest.mark.parametrize("report", [False, True])
def test_device_without_an_oplist(pytester, tmp_path, report):
    device = _device_without_a_list()
    extra = [f"--conformance-report={tmp_path / 'r.json'}"] if report else []
    result = pytester.runpytest(*ORACLE[:2], "--device", device, "--fake", *extra)
    _usage_line(result, f"nothing to check on device {device!r}", "--oplist PATH",
                f'[list] device = "{device}"', ", ".join(builtin_devices()))
    assert not (tmp_path / "r.json").exists()


# -- 5. drift: malformed reports and runs that did not complete -----------------------


def _report(results: list | None = None, **top) -> dict:
    results = results if results is not None else [{
        "nodeid": "amp_conformance/suite/test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm]",
        "test": "test_policy", "check": "policy", "param": "cpu-bfloat16-torch_16-mm",
        "amp_dtype": "bfloat16", "category": "torch_16", "entry": "mm", "op": "torch.mm",
        "outcome": "passed", "message": None,
        "observed": {"torch.mm": ["bfloat16"], "Tensor.mm": ["bfloat16"]}}]
    return {"schema": drift.SCHEMA, "torch": "2.13.0", "device": "cpu", "fake": False,
            "amp_dtypes": ["bfloat16"], "numerics": "bitwise", "results": results, **top}


def _with(change: dict) -> dict:
    data = _report()
    for key, value in change.items():
        if value is KeyError:
            data["results"][0].pop(key)
        else:
            data["results"][0][key] = value
    return data


@pytest.mark.parametrize("data, problem", [
    (_with({"observed": "bfloat16"}), "results[0]: 'observed' must be an object or null, got str"),
    (_with({"observed": ["bfloat16"]}), "results[0]: 'observed' must be an object or null, "
                                        "got list"),
    (_with({"observed": {"torch.mm": 16}}), "results[0]: observed['torch.mm'] must be a list of "
                                            "dtype names"),
    (_with({"outcome": KeyError}), "results[0]: key 'outcome' missing"),
    (_with({"nodeid": KeyError}), "results[0]: key 'nodeid' missing"),
    (_with({"outcome": "green"}), "results[0]: outcome 'green' is none of passed, failed"),
    (_with({"message": ["x"]}), "results[0]: 'message' must be a string or null, got list"),
    (_report(fake="no"), "'fake' must be true or false, got str"),
    (_report(results=[1]), "'results' must be a list of objects"),
    (_report(run="completed"), "'run' must be an object with a 'status' string"),
])
def test_drift_malformed_report_exit_2(tmp_path, capsys, data, problem):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_report()), encoding="utf-8")
    bad.write_text(json.dumps(data), encoding="utf-8")
    _cli_line(capsys, ["drift", str(good), str(bad)], f"error: {bad}: {problem}")


@pytest.mark.parametrize("status", ["interrupted", "crashed", "incomplete", "running"])
def test_drift_refuses_a_run_that_did_not_complete(tmp_path, capsys, status):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(_report(run={"status": "completed"})), encoding="utf-8")
    bad.write_text(json.dumps(_report(run={"status": status, "finished": 3, "collected": 9})),
                   encoding="utf-8")
    _cli_line(capsys, ["drift", str(bad), str(good)],
              f"{bad}: the run did not complete (run.status {status!r}, 3 of 9 items finished)")


def test_drift_reads_completed_and_older_reports(tmp_path, capsys):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    new.write_text(json.dumps(_report(run={"status": "completed"})), encoding="utf-8")
    old.write_text(json.dumps(_report()), encoding="utf-8")
    assert cli.main(["drift", str(old), str(new)]) == 0
    assert "no drift" in capsys.readouterr().out


# -- 6. coverage: lists, devices and backends -----------------------------------------


def test_coverage_oplist_for_another_device(tmp_path, capsys):
    other = tmp_path / "cuda_extra.toml"
    other.write_text(CPU_LIST.replace('device = "cpu"', 'device = "cuda"'), encoding="utf-8")
    _cli_line(capsys, ["coverage", "--device", "cpu", "--oplist", str(other)],
              f"{other}: describes another device than 'cpu': its [list] device is 'cuda'")


@pytest.mark.parametrize("kind, problem", [("directory", "is a directory, not an op-list file"),
                                           ("binary", "not UTF-8 text")])
def test_coverage_oplist_unreadable(capsys, bad_files, kind, problem):
    path = bad_files[kind]
    _cli_line(capsys, ["coverage", "--device", "cpu", "--oplist", str(path)], f"{path}: {problem}")


def test_coverage_unknown_device_lists_the_allowed_ones(capsys):
    _cli_line(capsys, ["coverage", "--device", "no_such_device"],
              "--device no_such_device: unknown autocast device type 'no_such_device'",
              "knows: cpu, cuda", "pass --backend-module MODULE")


@pytest.mark.parametrize("source, said", [
    ('raise RuntimeError("no driver")\n', "importing it raised RuntimeError: no driver"),
    ("import sys\nsys.exit(3)\n", "importing it called sys.exit(3)"),
    (None, "cannot import it: No module named"),
])
def test_coverage_backend_module_that_fails(tmp_path, monkeypatch, capsys, source, said):
    if source is not None:
        (tmp_path / "failing_backend_mod.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    _cli_line(capsys, ["coverage", "--backend-module", "failing_backend_mod"],
              f"--backend-module failing_backend_mod: {said}")


# -- 7. selftest --only with an unknown mutant -----------------------------------------


def test_selftest_unknown_mutant_is_a_usage_error(capsys):
    _cli_line(capsys, ["selftest", "--only", "bogus", "nope"],
              "--only bogus nope: no such mutants", "selftest --list")


# -- 8. --conformance-report where nothing can be written -----------------------------


def test_report_path_validation(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("", encoding="utf-8")
    fresh = tmp_path / "new" / "deeper" / "r.json"
    validate_report_path(fresh)  # can be created: fine, and nothing is left behind
    assert not (tmp_path / "new").exists()
    (tmp_path / "d.json").mkdir()
    for path, problem in [(blocker / "sub" / "r.json", f"{blocker} is not a directory"),
                          (tmp_path / "d.json", "it is a directory"),
                          (tmp_path / "r.html", "expected a path ending in .json")]:
        with pytest.raises(pytest.UsageError) as info:
            validate_report_path(path)
        message = str(info.value)
        assert message.startswith(f"amp-conformance: --conformance-report {path}: ")
        assert problem in message and "\n" not in message


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_report_path_that_cannot_be_written():
    with pytest.raises(pytest.UsageError, match=r"--conformance-report /proc/r\.json: cannot "
                                                r"write a file in /proc"):
        validate_report_path(Path("/proc/r.json"))


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_report_path_is_checked_before_the_run(pytester):
    result = pytester.runpytest(*ORACLE, "--conformance-report=/proc/r.json")
    _usage_line(result, "--conformance-report /proc/r.json: cannot write a file in /proc")


# -- 9. --oplist in a pytest run: a directory or a file that is not UTF-8 -------------


@pytest.mark.parametrize("kind, problem", [("directory", "is a directory, not an op-list file"),
                                           ("binary", "not UTF-8 text")])
def test_oplist_unreadable_in_a_run(pytester, bad_files, kind, problem):
    path = bad_files[kind]
    result = pytester.runpytest(*ORACLE, f"--oplist={path}")
    _usage_line(result, f"{path}: {problem}")
