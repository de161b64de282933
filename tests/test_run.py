"""A verdict survives faults: a backend that exits, aborts, hangs or leaks state, a run
that is terminated, or one where nothing executed never reads as a pass.

Each case runs the suite in a subprocess against ``tests/faults/amp_fault.py`` (a backend
module whose AutocastCPU ``mm`` kernel misbehaves as ``AMP_FAULT`` says), through
``python -m amp_conformance run`` where the fault kills the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import children

FAULTS = Path(__file__).parent / "faults"
SELECT = ["-k", "test_policy and torch_16-mm", "-p", "no:cacheprovider", "-q"]


def _env(fault: str) -> dict[str, str]:
    env = dict(os.environ, AMP_FAULT=fault)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), env.get("PYTHONPATH")]))
    return env


def _supervised(tmp_path: Path, fault: str, *extra: str, run_args: tuple[str, ...] = ()
                ) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "r.json"
    proc = children.run(
        [sys.executable, "-m", "amp_conformance", "run", f"--report={report}", "--item-timeout=4",
         "--hang-timeout=60", *run_args, "--", "--device", "cpu", "--backend-module", "amp_fault",
         *SELECT, *extra],
        cwd=tmp_path, env=_env(fault), capture_output=True, text=True, timeout=300)
    return proc, json.loads(report.read_text())


@pytest.mark.slow
def test_a_dying_backend_is_no_pass_and_the_item_is_named(tmp_path):
    """Without restarts the run is crashed (exit 3), the item it died in unfinished."""
    proc, data = _supervised(tmp_path, "abort", run_args=("--max-restarts=0",))
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "crashed in suite/test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm]" in last, last
    assert "SIGABRT" in last, last
    assert data["run"]["status"] == "crashed"
    assert data["run"]["running"].endswith("test_policy[cpu-bfloat16-torch_16-mm]")
    outcomes = {r["nodeid"].split("::")[-1]: r["outcome"] for r in data["results"]}
    assert outcomes["test_policy[cpu-bfloat16-torch_16-mm]"] == "unfinished"


@pytest.mark.slow
def test_a_dying_backend_is_restarted_and_each_crash_fails_its_item(tmp_path):
    """Restarted (the default), every item that killed its process fails once, naming how;
    the run is a verdict (exit 1), each process's own report kept beside it."""
    proc, data = _supervised(tmp_path, "exit0")
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert last.startswith("amp-conformance run: completed, exit status 1: CRASHED in "), last
    assert "process 2 runs the 1 items not yet run" in proc.stdout
    assert data["run"]["status"] == "completed" and data["run"]["processes"] == 2
    assert [r["how"] for r in data["run"]["restarts"]] == ["exit status 0", "exit status 0"]
    assert {r["nodeid"].split("::")[-1]: r["outcome"] for r in data["results"]} == {
        "test_policy[cpu-bfloat16-torch_16-mm]": "failed",
        "test_policy[cpu-float16-torch_16-mm]": "failed"}
    assert all(r["message"].startswith("the process died during this item (exit status 0)")
               for r in data["results"])
    first = json.loads((tmp_path / "r.1.json").read_text())
    assert first["run"]["status"] == "crashed" and first["run"]["how"] == "exit status 0"
    assert (tmp_path / "r.md").read_text().splitlines()[2].startswith("> **CRASHED in ")


@pytest.mark.slow
def test_a_hanging_kernel_fails_its_item_by_timeout(tmp_path):
    proc, data = _supervised(tmp_path, "hang")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = [r for r in data["results"] if r["outcome"] == "failed"]
    assert failed and all("Timeout" in (r["message"] or "") for r in failed), failed
    assert data["run"]["status"] == "completed"


def test_a_state_leak_is_pinned_on_the_item(tmp_path):
    proc = children.run(
        [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
         "--backend-module", "amp_fault", *SELECT],
        cwd=tmp_path, env=_env("leak"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout
    assert "xpu enabled: False before, True after" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_sigterm_leaves_an_interrupted_report_naming_the_item(tmp_path):
    report = tmp_path / "r.json"
    (tmp_path / "r.md").write_text("an older run's report\n")
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
         "--backend-module", "amp_fault", f"--conformance-report={report}", *SELECT],
        cwd=tmp_path, env=_env("hang"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    journal = tmp_path / "r.journal.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and '"start"' not in (
            journal.read_text() if journal.exists() else ""):
        time.sleep(0.2)
    time.sleep(0.5)
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=120)
    assert child.returncode == 2
    data = json.loads(report.read_text())
    assert data["run"]["status"] == "interrupted" and data["run"]["interrupted_by"] == "SIGTERM"
    assert data["run"]["running"].endswith("test_policy[cpu-bfloat16-torch_16-mm]")
    assert "INCOMPLETE RUN" in (tmp_path / "r.md").read_text()


@pytest.mark.slow
def test_a_run_where_nothing_executed_is_not_green(tmp_path):
    args = [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
            "-k", "bfloat16 and view_as_complex-float16", "-p", "no:cacheprovider", "-q"]
    proc = children.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 5, proc.stdout
    assert "no conformance check executed" in proc.stdout
    allowed = children.run([*args, "--amp-allow-empty"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert allowed.returncode == 0, allowed.stdout
