"""A report names what it judged (plugin/report/judged.py): the suite, torch's build, the
backend modules with their distributions, the device, the host and the environment that
changes behaviour, in the JSON and at the top of the HTML and Markdown pages."""

from __future__ import annotations

import json
import os
import sys

import numpy
import pytest
import torch

from amp_conformance.plugin.report import judged, render
from amp_conformance.tools import drift
from tests import children


@pytest.mark.slow
def test_the_json_holds_the_implementation_and_the_pages_show_it(tmp_path):
    path = tmp_path / "r.json"
    env = {**os.environ, "PJRT_DEVICE": "CPU", "AMP_CONFORMANCE_UNRELATED": "x",
           "SOME_SECRET": "never shown"}
    children.run([sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "-q",
                    "-p", "no:randomly", "--device", "cpu", "--backend-module", "numpy",
                    f"--conformance-report={path}", "-k", "test_policy and torch_16-mm-"],
                   env=env, cwd=tmp_path, capture_output=True, check=False, timeout=300)
    data = json.loads(path.read_text())
    assert data["schema"] == "amp-conformance-report/2"
    seen = data["judged"]
    assert seen["torch"]["version"] == torch.__version__
    assert seen["torch"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert seen["backends"] == [{"module": "numpy", "distribution": "numpy",
                                 "version": numpy.__version__}]
    assert seen["suite"]["version"]
    assert seen["device"]["type"] == "cpu"
    assert seen["environment"]["PJRT_DEVICE"] == "CPU"
    assert "SOME_SECRET" not in seen["environment"]
    top = judged.line(data)
    assert f"torch {torch.__version__}" in top and f"numpy {numpy.__version__}" in top
    assert "PJRT_DEVICE=CPU" in top
    assert top in path.with_suffix(".md").read_text()
    assert f'id="judged">{top}' in path.with_suffix(".html").read_text().replace("&#x27;", "'")


def test_a_fake_run_names_no_device_and_unreadable_facts_are_none(monkeypatch):
    assert judged.device_facts("cuda", fake=True) == {"type": "cuda", "name": None,
                                                      "capability": None}
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: 1 / 0)
    assert judged.torch_build()["cpu_capability"] is None
    assert judged.backend("no_such_module_here") == {"module": "no_such_module_here",
                                                     "distribution": None, "version": None}


def test_a_report_of_the_first_schema_still_reads(tmp_path):
    old = {"schema": "amp-conformance-report/1", "torch": "2.12.0", "device": "cpu",
           "fake": False, "run": {"status": "completed", "executed": 0}, "results": []}
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert drift.load(tmp_path / "old.json").torch == "2.12.0"
    assert judged.line(old) == ""
    assert "Judged:" not in render.render_markdown({**old, "summary": {}, "categories": {},
                                                    "causes": {}})
