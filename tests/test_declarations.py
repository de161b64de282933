"""Declarations drafted from a run (tools/declarations.py, ``run --draft-declarations``).
The vendor guide's step-by-step, which reaches a green declared run with them, is
tests/test_guide_walk.py's (one walk of the guide serves each of its tests)."""

from __future__ import annotations

import tomllib

from amp_conformance.plugin import vendor
from amp_conformance.tools import declarations


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
