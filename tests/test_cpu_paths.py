"""benchmarks/cpu_paths.py: which tests depend on the CPU's path, and the list .ci/run's AVX2
pass reads."""

import importlib
import sys
from pathlib import Path

import pytest

from tests import children

ROOT = Path(__file__).resolve().parents[1]
PASSED = {"outcome": "passed", "reason": "", "reads": []}


def _row(**fields):
    return {**PASSED, **fields}


@pytest.fixture
def cpu_paths(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("cpu_paths")


def test_a_test_depends_on_the_path_where_its_outcome_differs_or_it_reads_the_capability(
        cpu_paths):
    """Not where it only words the capability: the report, a probe's skip reason ("h")."""
    host = {"a": _row(), "b": _row(), "c": _row(outcome="skipped", reason="no LSTM (AVX512)"),
            "d": _row(reads=["amp_conformance/tools/guide_walk.py"]), "e": _row(),
            "f": _row(outcome="xfailed", reason="one"),
            "h": _row(reads=["amp_conformance/plugin/report/judged.py",
                             "amp_conformance/core/hardware.py"])}
    avx2 = {"a": _row(), "b": _row(outcome="skipped", reason="no primitive"),
            "c": _row(outcome="skipped", reason="no LSTM (AVX2)"), "d": _row(), "g": _row(),
            "f": _row(outcome="xfailed", reason="another"), "h": _row()}
    found = cpu_paths.depends(host, avx2)
    assert list(found) == ["b", "d", "e", "f", "g"], found
    assert found["b"] == "passed on the host's path, skipped (no primitive) on AVX2"
    assert found["d"] == "reads the CPU's capability (amp_conformance/tools/guide_walk.py)"
    assert found["e"] == found["g"] == "ran on one path only"


def test_a_reason_that_names_the_capability_alone_is_the_same_reason(cpu_paths):
    assert cpu_paths._plain("this CPU (AVX512) has no oneDNN float16 LSTM primitive") == \
        cpu_paths._plain("this CPU (AVX2) has no oneDNN float16 LSTM primitive")
    assert cpu_paths._plain("in /tmp/pytest-of-root/pytest-3/x at 0x7f00ab") == \
        cpu_paths._plain("in /tmp/pytest-of-root/pytest-9/y at 0x7f11cd")


def test_the_avx2_pass_reads_the_list_and_the_list_names_tests_that_exist(cpu_paths):
    """Every line a node id of the project's tests (the suite runs whole there), sorted, each
    collected: a test renamed since the list was written is noticed here, not in CI."""
    assert "@tests/cpu-paths.txt" in (ROOT / ".ci" / "run").read_text()
    ids = cpu_paths.LIST.read_text(encoding="utf-8").splitlines()
    assert ids and ids == sorted(set(ids)), ids
    assert all(i.startswith("tests/") and "::" in i for i in ids), ids
    collected = children.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                              f"@{cpu_paths.LIST}"], cwd=ROOT, capture_output=True, text=True,
                             timeout=300)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-2000:]
    assert f"{len(ids)} test" in collected.stdout.splitlines()[-1], collected.stdout[-2000:]


@pytest.mark.parametrize("capability", ["AVX2", "DEFAULT"])
def test_the_tool_refuses_a_host_that_has_only_one_path(cpu_paths, monkeypatch, capsys,
                                                        capability):
    import torch

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(sys, "argv", ["cpu_paths.py"])
    assert cpu_paths.main() == 2
    assert "needs a host above AVX2" in capsys.readouterr().err
