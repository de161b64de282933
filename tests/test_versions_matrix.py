"""The torch-version matrix: docs/versions.md's table is generated from the reports of
``nox -t matrix`` and names exactly the releases the noxfile and the nightly workflow run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_conformance.plugin.report.journal import SCHEMA
from amp_conformance.tools import matrix

ROOT = Path(__file__).resolve().parent.parent
yaml = pytest.importorskip("yaml", reason="pyyaml is a dev dependency (pip install -e '.[dev]')")


def _noxfile():
    from tests.test_workflow import load_noxfile
    pytest.importorskip("nox", reason="nox is a dev dependency (pip install -e '.[dev]')")
    return load_noxfile()


def test_the_table_names_the_releases_of_the_noxfile_and_the_workflow():
    nox = _noxfile()
    text = (ROOT / "docs" / "versions.md").read_text(encoding="utf-8")
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "nightly.yml").read_text())
    in_workflow = [v for v in workflow["jobs"]["suite"]["strategy"]["matrix"]["torch"]
                   if v != "nightly"]
    assert matrix.table_releases(text) == nox.TORCH_RELEASES == in_workflow


def _report(path: Path, torch: str, outcome: str, status: str = "completed") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"nodeid": "amp_conformance/suite/test_oplist.py::test_policy[cpu-bfloat16-torch_16-mm]",
              "test": "test_policy", "check": "policy", "param": "cpu-bfloat16-torch_16-mm",
              "amp_dtype": "bfloat16", "category": "torch_16", "entry": "mm", "op": "torch.mm",
              "outcome": outcome, "message": None, "observed": None, "defect": None}
    path.write_text(json.dumps({
        "schema": SCHEMA, "torch": torch, "device": "cpu", "fake": False,
        "run": {"status": status}, "results": [result],
        "summary": {"passed": int(outcome == "passed"), "failed": int(outcome == "failed"),
                    "skipped": 0, "xfailed": 0, "xpassed": 0, "error": 0, "not_applicable": 0}}))


def test_the_table_and_the_drift_come_from_the_reports(tmp_path):
    _report(tmp_path / "2.9" / "cpu.json", "2.9.1+cu128", "failed")
    _report(tmp_path / "2.10" / "cpu.json", "2.10.0+cu128", "passed")
    _report(tmp_path / "2.11" / "cpu.json", "2.11.0+cu128", "passed", status="crashed")
    text = matrix.markdown(tmp_path)
    assert matrix.releases(tmp_path) == ["2.9", "2.10", "2.11"]  # numeric order
    assert "| 2.9 | 2.9.1+cu128 | 0 passed, **1 failed**" in text
    assert "| 2.10 | 2.10.0+cu128 | 1 passed, 0 failed" in text
    assert "**did not complete** (crashed)" in text  # never reads as a pass
    assert "- `cpu` 2.9 → 2.10: 1 outcome" in text
    doc = tmp_path / "versions.md"
    doc.write_text(f"intro\n{matrix.BEGIN}\n{matrix.END}\noutro\n")
    assert matrix.write(doc, tmp_path) and not matrix.write(doc, tmp_path)
    assert matrix.table_releases(doc.read_text()) == ["2.9", "2.10", "2.11"]


class _Session:
    def __init__(self, tmp_path):
        self.posargs, self.calls, self.tmp = ["-n", "2"], [], tmp_path
        self.virtualenv = type("Venv", (), {"location": str(tmp_path / "venv")})()
        (tmp_path / "venv").mkdir()

    def create_tmp(self):
        return str(self.tmp)

    def install(self, *args, env=None):
        self.calls.append(("pip", "install", *args, env))

    def run(self, *args, **kwargs):
        self.calls.append(args)

    def error(self, message):
        raise AssertionError(message)


def test_a_release_session_installs_once_runs_every_tier_and_removes_its_env(tmp_path):
    nox = _noxfile()
    session = _Session(tmp_path)
    nox.release.func(session, torch="2.15")
    installs = [c for c in session.calls if c[0] == "pip"]
    assert [c[2:-1] for c in installs] == [("torch==2.15.*",), (".",)]
    assert all(c[-1]["PIP_NO_CACHE_DIR"] == "1" and Path(c[-1]["PIP_CONSTRAINT"]).read_text() == ""
               for c in installs)
    runs = [c for c in session.calls if c[0] == "pytest"]
    assert [c[c.index("--device") + 1] for c in runs] == ["cpu", "cuda", "xpu", "mps"]
    assert all(c[-2:] == ("-n", "2") for c in runs)
    assert not (tmp_path / "venv").exists()
