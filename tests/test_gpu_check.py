"""benchmarks/gpu_check.py: the commands it makes, its refusal without the device, and the
summary it writes (pure functions: no GPU, nothing run)."""

from __future__ import annotations

import importlib
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def gpu_check(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # gpu_check imports suite_speed beside it
    return importlib.import_module("gpu_check")


def test_dry_run_lists_every_run(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--device", "cuda",
                           "--out", str(tmp_path), "--dry-run"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    suite = "python -m pytest --pyargs amp_conformance --device cuda -q -p no:cacheprovider"
    assert lines == [
        "[coverage] (empty dir) python -m amp_conformance coverage --device cuda -q",
        f"[serial] (empty dir) {suite} --conformance-report {tmp_path}/serial.json",
        f"[xdist] (empty dir) {suite} -n auto --conformance-report {tmp_path}/xdist.json",
        f"[aot_eager] (empty dir) {suite} -n auto --amp-compile aot_eager "
        f"--conformance-report {tmp_path}/aot_eager.json",
        f"[inductor] (empty dir) {suite} -n auto --amp-compile inductor "
        f"--conformance-report {tmp_path}/inductor.json",
        f"[opinfo] (empty dir) {suite} -n auto --amp-opinfo -k test_opinfo "
        f"--conformance-report {tmp_path}/opinfo.json",
        f"[project] (checkout) python -m pytest -n auto -q tests --junitxml {tmp_path}/project.xml",
    ]
    assert not list(tmp_path.iterdir()), "a dry run writes nothing"


def test_only_picks_runs_and_refuses_an_unknown_one(gpu_check, tmp_path):
    runs = gpu_check.plan("xpu", tmp_path, ("coverage", "serial"), workers="4")
    assert [r.name for r in runs] == ["coverage", "serial"]  # in the check's order
    assert "--device xpu" in runs[1].command and runs[1].report == tmp_path / "serial.json"
    with pytest.raises(ValueError, match="unknown run nightly"):
        gpu_check.plan("cuda", tmp_path, ("nightly",))


def test_a_missing_device_exits_non_zero_saying_so(gpu_check, tmp_path, absent_device, capsys):
    assert gpu_check.main(["--device", absent_device, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"device {absent_device!r} is not available here" in err
    assert "nothing was run, no summary written" in err
    assert not (tmp_path / "o").exists()


REPORT = {
    "schema": "amp-conformance-report/1",
    "run": {"status": "completed", "exitstatus": 1},
    "summary": {"passed": 3, "failed": 1, "skipped": 2},
    "results": [
        {"nodeid": "amp_conformance/suite/test_oplist.py::test_policy[cuda-float16-torch_16-mm]",
         "outcome": "failed",
         "message": "torch.mm inside autocast: output dtype torch.float32, expected "
                    "torch.float16\nreproduce: ..."},
        {"nodeid": "amp_conformance/suite/test_oplist.py::test_policy[cuda-float16-torch_16-bmm]",
         "outcome": "passed", "message": None},
        {"nodeid": "amp_conformance/suite/test_oplist.py::test_numerics[cuda-x]",
         "outcome": "skipped", "message": "not applicable: needs torch >= 2.14"},
    ],
}


def test_summary_table_from_a_report_and_pytest_summary_line(gpu_check, tmp_path):
    report = tmp_path / "serial.json"
    report.write_text(json.dumps(REPORT))
    run = gpu_check.Run("serial", ("pytest", "--pyargs", "amp_conformance", "--device", "cuda"),
                        report=report)
    stdout = "....F.ss\nFAILED x - y\n==== 1 failed, 3 passed, 2 skipped, 4 warnings in 70.12s ====\n"
    outcome = gpu_check.read_outcome(run, 1, 70.04, stdout)
    assert outcome.summary == "1 failed, 3 passed, 2 skipped, 4 warnings in 70.12s"
    assert outcome.counts == {"failed": 1, "passed": 3, "skipped": 2}
    text = gpu_check.render("cuda", "NVIDIA H100", [outcome])
    assert text.splitlines() == [
        "# GPU check: cuda (NVIDIA H100)",
        "",
        "| run | command | pytest summary | wall | exit |",
        "| --- | --- | --- | --- | --- |",
        "| serial | `pytest --pyargs amp_conformance --device cuda` | 1 failed, 3 passed, "
        "2 skipped | 70.0 s | 1 |",
        "",
        "## serial: 1 failure(s)",
        "- `amp_conformance/suite/test_oplist.py::test_policy[cuda-float16-torch_16-mm]: "
        "torch.mm inside autocast: output dtype torch.float32, expected torch.float16`",
    ]


def test_a_run_without_a_completed_report_is_no_verdict(gpu_check, tmp_path):
    report = tmp_path / "xdist.json"
    report.write_text('{"run": {"status": "crashed"}, "results": []}')
    run = gpu_check.Run("xdist", ("pytest",), report=report)
    outcome = gpu_check.read_outcome(run, 3, 1.0, "")
    assert "report status 'crashed': no verdict" in gpu_check.render("cuda", "m", [outcome])
    gone = gpu_check.read_outcome(gpu_check.Run("xdist", ("pytest",), report=tmp_path / "no.json"),
                                  None, 5.0, "FAILED a.py::t - boom\n1 failed in 5s\n")
    assert gone.failures == ["a.py::t: boom"] and gone.note == "no report was written"
    assert "| timed out |" in gpu_check.render("cuda", "m", [gone])


def test_project_failures_from_junit_and_coverage_from_its_report(gpu_check, tmp_path):
    xml = tmp_path / "project.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.test_plugin" '
                   'name="test_unavailable_device_fails_the_run"><failure message="AssertionError:'
                   ' assert 1 == 4&#10;more">trace</failure></testcase>'
                   '<testcase classname="tests.test_x" name="test_ok"/></testsuite></testsuites>')
    assert gpu_check.failures_from_junit(xml) == [
        "tests/test_plugin.py::test_unavailable_device_fails_the_run: AssertionError: assert 1 == 4"]
    out = ("AutocastCUDA in torch 2.11: 126 overloads\nreached but not checked (1):\n"
           "  aten::mm  <- mm (raised: boom)\nexcluded (0):\nuncovered (1):\n"
           "  aten::bmm: no entry reaches it and no [[exclude]] names it\n"
           "coverage cuda: 124/126 covered, 1 reached but not checked, 0 excluded, 1 missing\n")
    outcome = gpu_check.read_outcome(gpu_check.Run("coverage", ("python",)), 1, 5.0, out)
    assert outcome.summary.startswith("coverage cuda: 124/126 covered")
    assert outcome.failures == [
        "reached but not checked: aten::mm  <- mm (raised: boom)",
        "uncovered: aten::bmm: no entry reaches it and no [[exclude]] names it"]


def test_the_summary_says_where_each_suite_runs_time_went(gpu_check, tmp_path):
    report = tmp_path / "serial.json"
    report.write_text(json.dumps({
        **REPORT, "tiers": {"default": {"option": None, "items": 3, "seconds": 9.5}},
        "families": {"policy": {"items": 2, "seconds": 1.25},
                     "compile_regions": {"items": 1, "seconds": 8.25}}}))
    run = gpu_check.Run("serial", ("pytest",), report=report)
    outcome = gpu_check.read_outcome(run, 1, 12.0, "1 failed, 3 passed in 11.9s\n")
    text = gpu_check.render("cuda", "m", [outcome])
    assert "## Where the time went" in text
    assert ("| serial | default 3 items 9.5 s | compile_regions 8.2 s (1), policy 1.2 s (2) |"
            in text.splitlines())


def test_overlap_runs_the_project_beside_the_untimed_runs_alone(gpu_check, tmp_path, monkeypatch):
    def fake(name: str, body: str = "pass") -> object:
        code = f"import time, pathlib; {body}; print('1 passed in 0.1s')"
        return gpu_check.Run(name, (sys.executable, "-c", code), in_checkout=name == "project")

    began, ended = tmp_path / "project.began", tmp_path / "aot_eager.ended"
    runs = [fake("coverage"), fake("serial"),
            fake("aot_eager", f"time.sleep(1); pathlib.Path({str(ended)!r}).write_text('')"),
            fake("opinfo"),
            fake("project", f"pathlib.Path({str(began)!r}).write_text("
                            f"str(pathlib.Path({str(ended)!r}).exists()))")]
    monkeypatch.setattr(gpu_check, "plan", lambda *args, **kwargs: runs)
    monkeypatch.setattr(gpu_check, "missing_device", lambda device: None)
    monkeypatch.setattr(gpu_check, "describe_machine", lambda device: "m")
    out = tmp_path / "out"
    assert gpu_check.main(["--out", str(out), "--overlap"]) == 0
    assert began.read_text() == "False"  # the project began before aot_eager ended
    rows = [line for line in (out / "summary.md").read_text().splitlines()
            if line.startswith("| ") and " s" in line][1:]  # the header, then a row a run
    assert [row.split(" | ")[0][2:] for row in rows] == ["coverage", "serial", "aot_eager",
                                                         "opinfo", "project"]
    assert "beside" not in rows[0] + rows[1]  # nothing runs beside a timed run, nor before it
    assert "(beside project)" in rows[2] and "(beside project)" in rows[3]
    assert "(beside aot_eager, opinfo)" in rows[4]
    assert sorted(p.name for p in out.iterdir()) == [
        "aot_eager.log", "coverage.log", "opinfo.log", "project.log", "serial.log", "summary.md"]


@pytest.mark.slow
@pytest.mark.parametrize("sigint", ["handled", "ignored"])
def test_a_run_past_its_timeout_is_interrupted_and_names_what_failed_so_far(gpu_check, tmp_path,
                                                                           sigint):
    """Stopped as Ctrl-C stops pytest: its short summary still names the failures, also
    where the check itself ignores SIGINT (a background command of a shell without job
    control), which its runs would inherit."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint == "ignored" else previous)
    try:
        _interrupted_run(gpu_check, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_run(gpu_check, tmp_path) -> None:
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_fails():\n    assert False\n\n"
        "def test_hangs():\n    time.sleep(60)\n")
    run = gpu_check.Run("project", (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                    str(tmp_path / "test_slow.py")))
    outcome = gpu_check.finish(gpu_check.start(run, tmp_path), tmp_path, timeout=5.0)
    assert outcome.exit_status is None and outcome.note.startswith("timed out after 5 s")
    log = (tmp_path / "project.log").read_text()
    assert len(outcome.failures) == 1 and "test_slow.py::test_fails" in outcome.failures[0], (
        f"{outcome.note}\n{log[-3000:]}")


def test_a_run_that_ctrl_c_does_not_end_is_killed_and_its_state_said(gpu_check, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr(gpu_check, "GRACE", 1.0)
    run = gpu_check.Run("deaf", (sys.executable, "-c", "import signal, time; signal.signal("
                                 "signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); "
                                 "time.sleep(60)"))
    outcome = gpu_check.finish(gpu_check.start(run, tmp_path), tmp_path, timeout=2.0)
    assert outcome.exit_status is None and outcome.wall < 30
    assert outcome.note.startswith("timed out after 2 s; Ctrl-C did not end it within 1 s, so "
                                   "it was killed (State:"), outcome.note
    if sys.platform == "linux":
        ignored = int(re.search(r"SigIgn: ([0-9a-f]+)", outcome.note)[1], 16)
        assert ignored & (1 << (signal.SIGINT - 1)), outcome.note


def test_the_page_shows_the_kept_summary_of_the_last_check(gpu_check):
    """docs/gpu.md's last check is the check's own summary (``--publish``), never typed."""
    from amp_conformance.core import generated

    shown = generated.section(gpu_check.DOC.read_text(encoding="utf-8"), gpu_check.BEGIN,
                              gpu_check.END)
    kept = gpu_check.KEPT.read_text(encoding="utf-8")
    assert shown == gpu_check.as_section(kept).strip("\n") + "\n"
    assert kept.startswith("# GPU check: cuda (NVIDIA H200")


def test_publish_keeps_a_summary_and_rewrites_only_the_section(gpu_check, tmp_path):
    doc, kept, summary = tmp_path / "gpu.md", tmp_path / "kept.md", tmp_path / "summary.md"
    doc.write_text(f"# On a GPU\n\n{gpu_check.BEGIN}\nold\n{gpu_check.END}\n\nafter\n")
    summary.write_text("# GPU check: x\n\n| run |\n\n## Where the time went\n")
    gpu_check.publish(summary, doc, kept)
    assert kept.read_text() == summary.read_text()
    assert doc.read_text() == (f"# On a GPU\n\n{gpu_check.BEGIN}\n\n### GPU check: x\n\n| run |\n\n"
                               f"#### Where the time went\n{gpu_check.END}\n\nafter\n")
