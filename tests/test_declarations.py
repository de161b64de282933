"""Declarations drafted from a run (tools/declarations.py, ``run --draft-declarations``),
and the vendor guide's step-by-step, which reaches a green declared run with them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from amp_conformance.plugin import vendor
from amp_conformance.tools import declarations

ROOT = Path(__file__).resolve().parent.parent


def _item(nodeid: str, check: str, outcome: str, message: str | None = None) -> dict:
    return {"nodeid": nodeid, "check": check, "outcome": outcome, "message": message,
            "amp_dtype": "float16"}


REPORT = {"device": "mydev", "torch": "2.13.0", "results": [
    _item("s/test_cast_cache.py::test_cache[mydev-float16]", "cast_cache", "failed",
          "AssertionError: weight cast 3 times in one region"),
    _item("s/test_gradscaler.py::test_gradscaler_sparse[mydev-float16-a]", "gradscaler_sparse",
          "failed", "NotImplementedError: Could not run 'aten::add' with arguments from the "
                    "'Sparsemydev' backend"),
    _item("s/test_oplist.py::test_numerics[mydev-float16-torch_fp32-sdpa]", "numerics", "failed",
          "ConformanceFailure: not equal (bitwise): Greatest relative difference: 0.5"),
    _item("s/test_oplist.py::test_numerics[mydev-bfloat16-torch_fp32-sdpa]", "numerics",
          "failed", "ConformanceFailure: not equal (bitwise): Greatest relative difference: 2.5"),
    _item("s/test_rnn.py::test_backward_grads[mydev-float16-lstm]", "rnn_modules", "error",
          "NotImplementedError: no kernel"),
    _item("s/test_oplist.py::test_policy[mydev-float16-torch_16-mm]", "policy", "passed"),
    _item("s/test_oplist.py::test_policy[mydev-float16-torch_16-bmm]", "policy", "xpassed",
          "declared [xfail.txt:3]"),
]}


def test_a_failing_check_that_needs_a_capability_drafts_it_absent():
    data = tomllib.loads(declarations.capabilities_text(REPORT))
    assert data["device"] == "mydev"
    assert data["capabilities"] == {"cast_cache": False, "sparse_grads": False}
    assert data["reasons"]["cast_cache"] == ("drafted from the run: AssertionError: weight cast N "
                                             "times in one region")


def test_the_drafted_capabilities_load_as_a_vendor_declaration(tmp_path):
    capabilities, _ = declarations.write(REPORT, tmp_path / "declared")
    values, reasons = vendor.parse_capabilities(vendor.read_capabilities(capabilities),
                                                str(capabilities), "mydev")
    assert values == {"cast_cache": False, "sparse_grads": False}
    why = vendor.Capabilities(values, reasons).why("cast_cache")
    assert why.startswith("device declares no cast cache (drafted from the run: "), why


def test_every_other_failure_is_a_commented_out_line_grouped_by_cause():
    text = declarations.xfail_text(REPORT)
    marked = [line for line in text.splitlines() if line.startswith(declarations.MARK)]
    assert marked == [
        "#xfail test_numerics[mydev-bfloat16-torch_fp32-sdpa]  # ConformanceFailure: not equal "
        "(bitwise): Greatest relative difference: N",
        "#xfail test_numerics[mydev-float16-torch_fp32-sdpa]  # ConformanceFailure: not equal "
        "(bitwise): Greatest relative difference: N",
        "#xfail test_backward_grads[mydev-float16-lstm]  # NotImplementedError: no kernel"]
    assert "# 2 × ConformanceFailure: not equal (bitwise)" in text
    assert "#   test_policy[mydev-float16-torch_16-bmm]" in text  # a declared one that passed
    assert "test_cache[" not in text and "sparse" not in text  # the capabilities' items


def test_no_line_is_active_until_a_person_takes_it(tmp_path):
    _, xfails = declarations.write(REPORT, tmp_path)
    assert vendor.read_xfail_file(xfails) == []
    taken = xfails.read_text().replace(declarations.MARK, "")
    xfails.write_text(taken)
    assert [e.pattern for e in vendor.read_xfail_file(xfails)] == [
        "test_numerics[mydev-bfloat16-torch_fp32-sdpa]",
        "test_numerics[mydev-float16-torch_fp32-sdpa]",
        "test_backward_grads[mydev-float16-lstm]"]


def _step_by_step() -> str:
    """docs/vendor-guide.md's step-by-step, less step 1 (the environment: this test's own
    serves)."""
    text = (ROOT / "docs" / "vendor-guide.md").read_text(encoding="utf-8")
    section = text[text.index("## A first run, step by step"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    steps = re.split(r"(?m)^(?=# \d+\. )", block)
    return "".join(s for s in steps if not s.startswith("# 1. "))


@pytest.mark.skipif(not hasattr(torch._C, "_acc"), reason="the example backend needs "
                    "torch._C._acc (a Python device guard)")
def test_the_vendor_guide_step_by_step_reaches_a_green_declared_run(tmp_path):
    """A vendor with the example backend, following the vendor guide alone, declares nothing
    by hand but the decisions the guide shows, and ends green."""
    script = _step_by_step()
    assert "review mydev.toml --accept" in script and "--draft-declarations declared" in script
    assert "review mydev.toml --keep" in script and "--accept '*'" not in script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # the guide's `python`: this test's interpreter
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "AMP_CONFORMANCE": str(ROOT),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    run = tmp_path / "run"
    run.mkdir()
    # as a person runs them: the first run fails (exit 1) and the next steps follow it
    proc = subprocess.run(["bash", "-u", "-c", script], cwd=run, env=env,
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # every block discover wrote is decided, in groups: two kept with their expected
    # failures, the rest accepted (90 on torch 2.13; the count follows torch's lists)
    assert "in 7 groups" in out and "[lower/unchanged-values-differ]  1 entry" in out, out[:4000]
    assert "review: accepted 0, kept 2, 88 left to review" in out, out[-4000:]
    assert "review: 4 expected failures of the kept entries added to mydev-xfail.txt" in out
    assert "review: accepted 88, kept 0, 0 left to review" in out, out[-4000:]
    assert "refused to accept" not in out
    assert "amp-conformance run: drafted declared/capabilities.toml and declared/xfail.txt" in out
    capabilities = tomllib.loads((run / "declared" / "capabilities.toml").read_text())
    assert capabilities["capabilities"] == {"cast_cache": False, "sparse_grads": False}
    last = out.strip().splitlines()
    assert last[-1] == "amp-conformance run: completed, pytest exit status 0", out[-3000:]
    assert re.search(r"\d+ passed, \d+ skipped, \d+ xfailed", out), out[-3000:]
    assert " failed" not in last[-2]
