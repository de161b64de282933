"""A lost device is named once and never blamed on later items (plugin/health.py), and the
report tells check families apart.

``tests/faults/amp_fault.py`` with ``AMP_FAULT=lost``: the first call of the AutocastCPU
``mm`` kernel "loses the device"; every later call, and the probe that
``tests/faults/amp_fault_health.py`` declares through ``pytest_amp_conformance_device_health``,
raises "FAULT: device lost (sticky)", as a CUDA context does after a device-side assert. Of
the items selected, test_policy[cpu-bfloat16-torch_16-mm] (an early one) is the only one that
calls the kernel: without the health check every later item of its process would be at the
device's mercy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amp_conformance import __main__ as cli
from amp_conformance.plugin import health
from amp_conformance.plugin.report import banner, journal, render
from amp_conformance.tools import run as supervised
from tests import children

FAULTS = Path(__file__).parent / "faults"
SELECT = ["--pyargs", "amp_conformance.suite.test_oplist", "--device", "cpu",
          "--backend-module", "amp_fault", "-p", "amp_fault_health", "-p", "no:cacheprovider",
          "-q", "-k", "bfloat16 and torch_16 and (test_policy or test_outside)"]
POISON = "test_policy[cpu-bfloat16-torch_16-mm]"
#: SELECT widened to a test function that calls each op a second time (numerics)
PERSISTENT_K = "bfloat16 and torch_16 and (test_policy or test_outside or test_numerics)"
LOST = "DEVICE LOST during this item: the device health probe raised RuntimeError: FAULT: device lost"


def _env(fault: str = "lost", **more: str) -> dict[str, str]:
    env = dict(os.environ, AMP_FAULT=fault, **more)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), env.get("PYTHONPATH")]))
    return env


def _pytest(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "r.json"
    proc = children.run([sys.executable, "-m", "pytest", *SELECT, f"--conformance-report={report}",
                           *extra], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    return proc, json.loads(report.read_text())


def _supervised(tmp_path: Path, *extra: str, env: dict[str, str] | None = None,
                run_args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "r.json"
    proc = children.run([sys.executable, "-m", "amp_conformance", "run", f"--report={report}",
                           *run_args, "--", *SELECT, *extra], cwd=tmp_path, env=env or _env(),
                          capture_output=True, text=True, timeout=300)
    return proc, json.loads(report.read_text())


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> dict[str, str]:
    """Each item's outcome on a sound device (AMP_FAULT unset: no kernel replaced), so that
    a restarted run is held to it, this machine's skips (oneDNN's LSTM on AVX2) included."""
    where = tmp_path_factory.mktemp("healthy")
    env = {k: v for k, v in _env().items() if k != "AMP_FAULT"}
    children.run([sys.executable, "-m", "pytest", *SELECT, "-k", PERSISTENT_K,
                    f"--conformance-report={where / 'r.json'}"], cwd=where, env=env,
                   capture_output=True, timeout=300)
    return _outcomes(json.loads((where / "r.json").read_text()))


def _outcomes(data: dict) -> dict[str, str]:
    return {r["nodeid"].split("::")[-1]: r["outcome"] for r in data["results"]}


def _banner(path: Path) -> str:
    """The first line of a Markdown report after its title."""
    return path.read_text(encoding="utf-8").splitlines()[2]


def _assert_stopped_at_the_poison(data: dict, worker: bool) -> None:
    """The report of the one process that lost its device: the poisoning item failed once
    saying so, every other result passed, the items it never ran counted as not run."""
    run = data["run"]
    assert run["status"] == "device lost" and run["exitstatus"] == health.DEVICE_LOST
    assert run["lost_after"].endswith(POISON) and len(run["lost"]) == 1
    assert run["lost_on"].startswith("gw") if worker else run["lost_on"] is None
    assert run["not_run"] > 0 and len(data["results"]) == run["collected"]
    not_run = [r for r in data["results"] if r["outcome"] == "not run"]
    assert len(not_run) == run["not_run"] == sum(run["not_run_families"].values())
    # a check, or where an xdist controller heard only ids and none of it ran, the test's name
    assert set(run["not_run_families"]) <= {"policy", "outside", "test_policy", "test_outside"}
    poisoned = [r for r in data["results"] if r["nodeid"].endswith(POISON)]
    assert len(poisoned) == 1 and poisoned[0]["outcome"] == "failed"
    assert poisoned[0]["message"].startswith(LOST), poisoned[0]["message"]
    assert set(_outcomes(data).values()) <= {"failed", "passed", "skipped", "not run"}
    assert data["summary"]["failed"] == 1


def test_plain_serial_run_stops_where_the_device_was_lost(tmp_path):
    proc, data = _pytest(tmp_path)
    assert proc.returncode == health.DEVICE_LOST, proc.stdout + proc.stderr
    _assert_stopped_at_the_poison(data, worker=False)
    before = [n for n, o in _outcomes(data).items() if n != POISON and o != "not run"]
    assert before and all(n.startswith("test_policy") for n in before)  # collected before it
    banner = _banner(tmp_path / "r.md")
    assert banner.startswith(f"> **DEVICE LOST after {data['run']['lost_after']}: "
                             f"{data['run']['not_run']} items not run (outside 21, policy 16)."), banner
    assert f"no pass rate: {data['run']['not_run']} items not run" in (tmp_path / "r.md").read_text()
    assert '<p class="banner fail"><strong>DEVICE LOST after' in (tmp_path / "r.html").read_text()
    assert f"DEVICE LOST after ::{POISON}" in proc.stdout.replace("suite/test_oplist.py", "")


@pytest.mark.slow
class TestHeldToASoundDevice:
    """Runs whose every other item is held to its outcome on a sound device (:func:`healthy`,
    one run for the class, which one worker runs whole)."""

    def test_supervised_serial_run_goes_on_in_a_fresh_process(self, tmp_path, healthy):
        proc, data = _supervised(tmp_path)
        last = proc.stdout.strip().splitlines()[-1]
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert last.startswith("amp-conformance run: completed, exit status 1: DEVICE LOST after "), last
        _assert_stopped_at_the_poison(json.loads((tmp_path / "r.1.json").read_text()), worker=False)
        run = data["run"]
        assert run["status"] == "completed" and run["exitstatus"] == 1 and run["processes"] == 2
        assert run["not_run"] == 0 and len(data["results"]) == run["collected"]
        assert [r["kind"] for r in run["restarts"]] == ["device lost"]
        outcomes = _outcomes(data)
        assert outcomes.pop(POISON) == "failed"
        assert outcomes == {n: o for n, o in healthy.items() if n in outcomes}
        assert set(outcomes.values()) <= {"passed", "skipped"}  # never "not run"
        assert _banner(tmp_path / "r.md").startswith(
            f"> **DEVICE LOST after {run['restarts'][0]['after']}: that item failed, once, and every "
            "other item ran in a sound process (2 processes).")

    def test_xdist_worker_that_lost_its_device_stops_and_the_run_goes_on(self, tmp_path, healthy):
        """The first process is a plain ``pytest -n 2`` run: the worker that lost its device
        stops, the other's verdicts stand, what the first never ran is not run; the second
        process runs exactly those."""
        proc, data = _supervised(tmp_path, "-n", "2")
        assert proc.returncode == 1, proc.stdout + proc.stderr
        first = json.loads((tmp_path / "r.1.json").read_text())
        _assert_stopped_at_the_poison(first, worker=True)
        lost = first["run"]
        assert _banner(tmp_path / "r.1.md").startswith(
            f"> **DEVICE LOST after {lost['lost_after']} on {lost['lost_on']}: "
            f"{lost['not_run']} items not run ("), _banner(tmp_path / "r.1.md")
        run = data["run"]
        assert run["status"] == "completed" and run["restarts"][0]["on"] == lost["lost_on"]
        assert len(data["results"]) == run["collected"] == lost["collected"]
        outcomes = _outcomes(data)
        assert outcomes.pop(POISON) == "failed"
        assert outcomes == {n: o for n, o in healthy.items() if n in outcomes}
        second = json.loads((tmp_path / "r.2.json").read_text())
        assert len(second["results"]) == lost["not_run"]
        # the workers' -k deselection reaches the controller's report; the merged one keeps the
        # user's selection (the second child's deselection adds the items the first ran)
        total = run["collected"] + run["deselected"]
        assert run["deselected"] == lost["deselected"] > 0
        assert second["run"]["collected"] + second["run"]["deselected"] == total
        assert data["options"]["keyword"] == SELECT[-1]

    def test_a_persistent_kernel_fault_is_quarantined_after_one_item(self, tmp_path, healthy):
        """AMP_FAULT=persistent: baddbmm's kernel loses the device in every process. With no
        option the run completes in two processes: the first item that calls baddbmm failed
        once, the op was quarantined, every later caller is reported not run (never retried,
        never a verdict), the rest is as on a sound device; the verdict says it is partial."""
        log = tmp_path / "calls.txt"
        proc, data = _supervised(tmp_path, "-k", PERSISTENT_K,
                                 env=_env("persistent", AMP_FAULT_OPS="baddbmm", AMP_FAULT_LOG=str(log)))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        callers = sorted({line.split("::")[-1] for line in log.read_text().splitlines()})
        assert len(callers) == 1, callers  # the quarantine kept the faulty kernel from a second item
        run = data["run"]
        assert run["status"] == "completed" and run["not_run"] == 0 and run["processes"] == 2
        # the op is guarded under autocast and below it: its calls outside autocast too are held
        held = sorted(n.split("::")[-1] for n in run["quarantined"]["aten::baddbmm"])
        assert held == ["test_numerics[cpu-bfloat16-torch_16-baddbmm]",
                        "test_outside[cpu-bfloat16-torch_16-baddbmm]"]
        assert data["summary"]["quarantined"] == 2
        outcomes = _outcomes(data)
        assert outcomes[callers[0]] == "failed"
        assert {outcomes[n] for n in held} == {"not run"}
        touched = {callers[0], *held}
        assert {n: o for n, o in outcomes.items() if n not in touched} == {
            n: o for n, o in healthy.items() if n not in touched}
        last = proc.stdout.strip().splitlines()[-1]
        assert "DEVICE LOST in aten::baddbmm after " in last, last
        assert ("PARTIAL VERDICT: 2 items not run, quarantined: aten::baddbmm loses the device "
                "(2 items)") in last, last
        assert "PARTIAL VERDICT" in _banner(tmp_path / "r.md")

    @pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
    def test_without_quarantine_every_caller_is_tried(self, tmp_path, healthy, workers):
        """--no-quarantine: each item that calls the faulty op runs in a fresh process and
        fails once (one process per caller, as before the quarantine); under xdist too, where
        the controller then keeps no quarantine file of its own."""
        log = tmp_path / "calls.txt"
        proc, data = _supervised(tmp_path, "-k", PERSISTENT_K, *workers, run_args=("--no-quarantine",),
                                 env=_env("persistent", AMP_FAULT_OPS="baddbmm", AMP_FAULT_LOG=str(log)))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        callers = {line.split("::")[-1] for line in log.read_text().splitlines()}
        assert len(callers) == 2  # test_policy and test_numerics of baddbmm
        run = data["run"]
        assert not run["quarantined"] and data["summary"]["quarantined"] == 0
        if not workers:
            assert run["processes"] == len(callers) + 1
        outcomes = _outcomes(data)
        assert {n for n, o in outcomes.items() if o == "failed"} == callers
        last = proc.stdout.strip().splitlines()[-1]
        assert "DEVICE LOST in aten::baddbmm (2 items): each of those items failed, once" in last, last


# -- in process: a healthy device, CPU without a probe, a malformed hook ------------------


class _Spy:
    """Reads, at the session's end, whether the health watch was on and the probe count."""

    probes: int | None = None
    watching = False

    def pytest_sessionfinish(self, session):
        plugins = session.config.pluginmanager
        self.watching = [name for name in (health.WATCH, health.OBSERVER)
                         if plugins.get_plugin(name) is not None]
        fault = sys.modules.get("amp_fault")
        self.probes = fault._STATE["probes"] if fault is not None else None


def test_a_healthy_device_is_probed_and_never_lost(pytester, monkeypatch, tmp_path):
    monkeypatch.delenv("AMP_FAULT", raising=False)  # amp_fault registers no kernel
    monkeypatch.syspath_prepend(str(FAULTS))
    spy = _Spy()
    result = pytester.runpytest(*SELECT, f"--conformance-report={tmp_path / 'r.json'}",
                                plugins=[spy])
    assert result.ret == 0, result.stdout.str()
    data = json.loads((tmp_path / "r.json").read_text())
    assert len(spy.watching) == 2 and spy.probes == 1 + data["run"]["executed"]  # start, items
    assert data["run"]["status"] == "completed" and data["run"]["lost"] == []
    assert "DEVICE LOST" not in result.stdout.str()


def test_cpu_without_a_declared_probe_is_not_watched(pytester):
    """Nothing per item: the check costs a plain CPU run nothing."""
    spy = _Spy()
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_oplist", "-q",
                                "-k", "test_policy and bfloat16 and torch_16-mm", plugins=[spy])
    assert result.ret == 0 and spy.watching == []


def test_a_fake_device_is_not_watched(pytester, absent_device):
    """--fake runs the policy without the hardware: there is no device to lose."""
    spy = _Spy()
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_oplist", "-q", "--fake",
                                "--device", absent_device, "-k", "test_policy and torch_16-mm",
                                plugins=[spy])
    assert result.ret == 0, result.stdout.str()
    assert spy.watching == []


def test_a_malformed_health_hook_is_a_usage_error(pytester):
    pytester.makeconftest("def pytest_amp_conformance_device_health(config, device):\n"
                          "    return {'probe': 42}\n")
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_oplist", "-q",
                                "-k", "test_policy and bfloat16 and torch_16-mm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the probe is int, not callable" in result.stderr.str()


# -- the decision, and the report's words -------------------------------------------------


def _gone() -> None:
    raise RuntimeError("gone")


def test_the_probe_decides_and_words_decide_only_without_one():
    words = health.Health(None, tuple(re.compile(w, re.IGNORECASE) for w in health.WORDS))
    assert words.loss("AcceleratorError: CUDA error: device-side assert triggered")
    assert words.loss("ValueError: a wrong dtype") is None and words.loss(None) is None
    assert health.Health(lambda: None, words.patterns).loss("AcceleratorError: CUDA error") is None
    reason = health.Health(_gone, ()).loss("ValueError: x")
    assert reason == "the device health probe raised RuntimeError: gone; the item raised ValueError: x"


def test_a_probe_that_passes_once_the_failed_item_lets_go_is_no_loss():
    """A lazy device (XLA) re-runs the pending graph of every live tensor at the next read:
    while the failed item's frames hold the tensors of the graph that failed, the probe
    fails with the item's error; once they are released it passes. A dead device fails
    both tries."""
    held = {"graph": object()}
    released = []

    def lazy() -> None:
        if held:
            raise RuntimeError("Executable expected parameter 3 of size 32")

    def release() -> None:
        released.append(True)
        held.clear()
    assert health.Health(lazy, ()).loss("RuntimeError: Executable expected", release) is None
    assert released == [True]
    reason = health.Health(_gone, ()).loss("ValueError: x", lambda: released.append(True))
    assert reason.startswith("the device health probe raised RuntimeError: gone")
    assert released == [True, True]


def _result(check: str, outcome: str, category: str | None = None) -> dict:
    return {"nodeid": f"t.py::test_{check}[{outcome}]", "check": check, "category": category,
            "outcome": outcome, "message": None, "amp_dtype": None, "entry": None, "op": None,
            "test": f"test_{check}", "param": outcome, "observed": None, "defect": None}


def test_failures_outside_the_op_lists_never_read_as_a_bare_pass_rate():
    results = [_result("policy", "passed", "torch_16")] * 9 + [
        _result("compile_regions", "failed"), _result("compile_regions", "passed")]
    summary = dict.fromkeys((*journal.OUTCOMES, "not_applicable", "unfinished"), 0)
    summary.update(passed=10, failed=1)
    data = {"device": "cpu", "summary": summary, "results": results,
            "categories": journal.categories(results), "families": journal.families(results),
            "run": {"status": "completed", "executed": 11, "not_run": 0}}
    assert list(data["families"]) == ["compile_regions", "policy"]  # by family name
    assert data["families"]["compile_regions"]["failed"] == 1
    assert data["families"]["policy"]["per_entry"] is True
    md = render.render_markdown(data)
    assert "pass rate **90.9%**; **1 failures outside the op lists** (1 in compile_regions)" in md
    assert "| check family | passed |" in md and "| compile_regions | 1 | 1 | 0 |" in md
    html = render.render_html(data)
    assert 'id="families"' in html and "1 failures outside the op lists" in html


def test_supervised_verdict_of_a_device_lost_with_no_restart_left():
    data = {"run": {"status": "device lost", "lost_after": "s.py::test_x[mm]", "lost_on": "gw3",
                    "not_run": 7, "executed": 4}}
    code, line = supervised.verdict(health.DEVICE_LOST, data)
    assert code == health.DEVICE_LOST
    assert line.startswith("amp-conformance run: DEVICE LOST after s.py::test_x[mm] on gw3: 7 items "
                           "not run."), line


# -- a kernel that loses the device on every call; a device dead from the start -----------


@pytest.mark.slow
def test_a_lost_op_is_quarantined_in_every_xdist_worker(tmp_path):
    """Under -n 2 a worker that loses its device writes the op to the run's quarantine file;
    the other worker reads it before its next item and no longer calls the op."""
    log = tmp_path / "calls.txt"
    proc, data = _supervised(tmp_path, "-k", "torch_16 and (test_policy or test_numerics or "
                             "test_outside or test_legacy)", "-n", "2",
                             env=_env("persistent", AMP_FAULT_OPS="mm", AMP_FAULT_LOG=str(log)))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    callers = {line.split("::")[-1] for line in log.read_text().splitlines()}
    held = data["run"]["quarantined"].get("aten::mm", [])
    assert held and len(callers) <= 2, (callers, held)  # at most one loss per worker, then none
    assert data["run"]["status"] == "completed"
    assert data["run"]["processes"] == 1  # the worker was replaced, not the run


def _xdist_persistent(tmp_path: Path, dist: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / "r.json"
    select = [*SELECT[:-1], "torch_16 and (test_policy or test_numerics or test_outside)"]
    proc = children.run([sys.executable, "-m", "pytest", *select, "-n", "2", "--dist", dist,
                           f"--conformance-report={report}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=_env("persistent", AMP_FAULT_OPS="mm"))
    return proc, json.loads(report.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("dist", health.REPLACEABLE)
def test_a_worker_that_loses_its_device_to_an_op_is_replaced(tmp_path, dist):
    """Plain ``pytest -n 2``: the worker whose device an op lost ends after that item's
    reports; xdist starts a fresh worker, which runs what the lost one had not. The item
    fails once (no "crashed while running" beside it), every other item has a verdict or
    is quarantined, and the run still exits 6."""
    proc, data = _xdist_persistent(tmp_path, dist)
    out = proc.stdout + proc.stderr
    assert proc.returncode == health.DEVICE_LOST, out[-3000:]
    assert "node down" in out and "crashed while running" not in out, out[-3000:]
    run, results = data["run"], data["results"]
    assert sum(_counts(proc.stdout).values()) == run["collected"]  # no item reported twice
    assert run["status"] == "device lost" and run["not_run"] == 0
    assert len(results) == run["collected"] > 100
    failed = [r for r in results if r["outcome"] == "failed"]
    # results by node id, losses as they came: two workers may each lose theirs
    assert [r["nodeid"] for r in failed] == sorted(x["nodeid"] for x in run["lost"]), failed
    assert all(r["message"].startswith(LOST) and "this worker ends here and a fresh one runs "
               "the items after it; aten::mm is quarantined" in r["message"] for r in failed)
    assert 1 <= len(failed) <= 2  # at most one loss per worker before the guard holds the op
    held = run["quarantined"]["aten::mm"]
    assert {r["outcome"] for r in results if r["nodeid"] not in held} <= {"passed", "skipped",
                                                                          "failed"}
    assert "the worker was replaced" in out


def _counts(out: str) -> dict[str, int]:
    line = out.strip().splitlines()[-1]
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", line) if kind != "in"}


@pytest.mark.slow
def test_a_scheduler_that_runs_the_lost_item_again_stops_the_run(tmp_path):
    """--dist loadfile hands a dead worker's whole file to another worker, the item it died
    in included: no worker is replaced, the run stops at the loss as before, and no item
    is reported twice."""
    proc, data = _xdist_persistent(tmp_path, "loadfile")
    out = proc.stdout + proc.stderr
    assert proc.returncode == health.DEVICE_LOST, out[-3000:]
    assert "node down" not in out and "the worker was replaced" not in out, out[-3000:]
    run = data["run"]
    assert run["status"] == "device lost" and len(data["results"]) == run["collected"]
    assert [r["nodeid"] for r in data["results"] if r["outcome"] == "failed"] == sorted(
        x["nodeid"] for x in run["lost"])


@pytest.mark.slow
def test_a_device_dead_from_the_start_ends_quickly_with_exit_6(tmp_path):
    """AMP_FAULT=dead: every process loses its device in its first item. The run gives up
    after --dead-after (3) processes in a row, names why, and lists the rest as not run."""
    proc, data = _supervised(tmp_path, env=_env("dead"))
    assert proc.returncode == health.DEVICE_LOST, proc.stdout + proc.stderr
    run = data["run"]
    assert run["status"] == "device lost" and run["exitstatus"] == health.DEVICE_LOST
    assert run["processes"] == supervised.DEAD_AFTER and len(run["restarts"]) == 2
    assert run["gave_up"].startswith("the device is dead: 3 processes in a row lost it")
    assert run["not_run"] == run["collected"] - 3 == sum(run["not_run_families"].values())
    assert sum(r["outcome"] == "not run" for r in data["results"]) == run["not_run"]
    last = proc.stdout.strip().splitlines()[-1]
    families = ", ".join(f"{k} {v}" for k, v in sorted(run["not_run_families"].items(),
                                                       key=lambda kv: (-kv[1], kv[0])))
    assert f"{run['not_run']} items not run ({families})." in last, last
    assert last.endswith("It gave up restarting: the device is dead: 3 processes in a row lost "
                         "it (or died) in their first item, no op blamed."), last
    assert "runs the rest in a fresh process" not in last


@pytest.mark.slow
def test_a_dead_device_under_xdist_ends_quickly_too(tmp_path):
    """AMP_FAULT=dead with -n 2: each process loses its device in each worker's first item
    (two items, no op blamed), which counts as no progress: the run gives up after
    --dead-after processes instead of restarting until every item has failed."""
    proc, data = _supervised(tmp_path, "-n", "2", env=_env("dead"))
    assert proc.returncode == health.DEVICE_LOST, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = data["run"]
    assert run["processes"] == supervised.DEAD_AFTER, run
    assert run["gave_up"].startswith("the device is dead: 3 processes in a row lost it")
    assert run["not_run"] > 0


def test_restarts_follow_progress_and_stop_only_when_told():
    limits = supervised.Limits()
    assert limits.give_up(restarts=500, in_a_row=2, elapsed=1e6) is None  # no fixed cap
    assert "device is dead" in limits.give_up(restarts=2, in_a_row=3, elapsed=0)
    fake = limits.give_up(restarts=2, in_a_row=3, elapsed=0, fake=True)
    assert "device is dead" not in fake and "the processes died, not a device" in fake
    assert "--max-restarts 4" in supervised.Limits(max_restarts=4).give_up(4, 0, 0)
    assert "--time-budget 60 s" in supervised.Limits(time_budget=60).give_up(1, 0, 61)


@pytest.mark.parametrize("pytest_args, cap", [
    (["--device", "cpu"], None),  # serial: no xdist option at all
    (["--device", "cpu", "-n", "2"], str(supervised.WORKER_REPLACEMENTS)),
    (["--device", "cpu", "-n2"], str(supervised.WORKER_REPLACEMENTS)),
    (["--device", "cpu", "--numprocesses=auto"], str(supervised.WORKER_REPLACEMENTS)),
    (["--device", "cpu", "--noconftest"], None),
    (["-n", "2", "--max-worker-restart", "3"], "3"),  # the user's cap stands
])
def test_a_child_under_xdist_may_replace_a_worker_per_faulty_op(pytest_args, cap):
    parser = argparse.ArgumentParser()
    supervised.add_arguments(parser)
    command, _ = supervised.child_command(parser.parse_args(["--", *pytest_args]))
    assert supervised._option_value(command, "--max-worker-restart") == cap
    assert sum(a.startswith("--max-worker-restart") for a in command) == (cap is not None)


def test_dead_after_must_be_a_positive_whole_number(capsys):
    with pytest.raises(SystemExit) as exited:  # argparse's usage error, before any child
        cli.main(["run", "--dead-after", "0", "--", "--co"])
    assert exited.value.code == 2
    assert "expected a whole number of at least 1, not '0'" in capsys.readouterr().err


def test_forty_faulty_ops_read_as_forty_ops():
    restarts = [{"kind": "device lost", "after": f"t.py::test_{k}[op{i}]", "on": None,
                 "how": f"probe raised … in aten::op{i}", "op": f"aten::op{i}"}
                for i in range(40) for k in ("policy", "numerics", "legacy", "backward")]
    note = banner.restart_note({"run": {"restarts": restarts, "processes": 161}})
    assert note.startswith("40 ops lost the device: DEVICE LOST in aten::op0 (4 items); ")
    assert note.count("DEVICE LOST") == 40 and "t.py::" not in note
    assert list(banner.lost_by_op({"run": {"restarts": restarts}})) == [f"aten::op{i}"
                                                                        for i in range(40)]
    assert banner.blamed_op("RuntimeError: FAULT: device lost (sticky) in aten::baddbmm.") == \
        "aten::baddbmm"


@pytest.mark.slow
def test_callers_of_a_faulty_op_in_a_row_are_no_dead_device(tmp_path):
    """Every item of test_cache_interactions calls mm: with mm's kernel faulty and no
    quarantine each process loses the device in its first item, but the probe blames
    aten::mm each time, so the run goes on (a dead device is one no op is blamed for) and
    completes."""
    log = tmp_path / "calls.txt"
    report = tmp_path / "r.json"
    proc = children.run(
        [sys.executable, "-m", "amp_conformance", "run", f"--report={report}", "--no-quarantine",
         "--", "--pyargs",
         "amp_conformance.suite.test_cache_interactions", "--device", "cpu", "--backend-module",
         "amp_fault", "-p", "amp_fault_health", "-p", "no:cacheprovider", "-q", "-k", "bfloat16"],
        cwd=tmp_path, env=_env("persistent", AMP_FAULT_OPS="mm", AMP_FAULT_LOG=str(log)),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    callers = {line.split("::")[-1] for line in log.read_text().splitlines()}
    assert len(callers) > supervised.DEAD_AFTER and data["run"]["processes"] == len(callers)
    assert data["run"]["status"] == "completed" and "gave_up" not in data["run"]
    assert {n for n, o in _outcomes(data).items() if o == "failed"} == callers


def test_a_command_to_a_worker_that_just_ended_is_dropped():
    """health.tolerate_ended: an OSError sending to a worker (its pipe gone: it ended, e.g.
    after losing its device at the same time as another worker) is dropped, as xdist drops
    its own "shutdown" to one; xdist then hears that the worker ended and hands its items on."""
    sent = []

    class Node:
        def sendcommand(self, name, **kwargs):
            sent.append(name)
            raise OSError("cannot send to <Channel id=1 closed>")

    node = Node()
    health.tolerate_ended(node)
    node.sendcommand("runtests", indices=[3, 4])
    assert sent == ["runtests"]
