"""A kernel the device lacks is a named cause (plugin/missing_kernels.py): the dispatcher's
"Could not run 'aten::X' ... backend" found in the error or its chain, a failure naming the
op where it is in the device's policy, a not-applicable skip where the check needs it as a
tool, one cause per op; run against the example backend with ops taken away."""

from __future__ import annotations

import re

import pytest

from amp_conformance.core.errors import ConformanceFailure, missing_kernel
from amp_conformance.plugin.report.causes import group
from tests.test_vendor_workflow import _example, _summary_counts, needs_python_backend

DISPATCHER = ("Could not run 'aten::_amp_update_scale_' with arguments from the 'PrivateUse1' "
              "backend. This could be because the operator doesn't exist for this backend")


def test_the_op_is_read_from_the_error_its_chain_or_a_message():
    assert missing_kernel(NotImplementedError(DISPATCHER)) == "aten::_amp_update_scale_"
    try:
        try:
            raise NotImplementedError(DISPATCHER)
        except NotImplementedError as inner:
            raise ConformanceFailure("the scaler's update raised") from inner
    except ConformanceFailure as outer:
        assert missing_kernel(outer) == "aten::_amp_update_scale_"
    assert missing_kernel(f"torch.mm raised NotImplementedError: {DISPATCHER}") == (
        "aten::_amp_update_scale_")
    assert missing_kernel(RuntimeError("\"addmm\" not implemented for 'Half'")) is None
    assert missing_kernel(None) is None


def test_each_missing_op_is_one_cause_whatever_the_item():
    rows = [{"nodeid": f"t::{i}[{op}]", "outcome": "failed", "op": op,
             "message": f"fakegpu has no kernel for aten::{op}, an op of its autocast policy\n"
                        f"torch.{op} [entry {op}] on fakegpu: ..."}
            for i, op in enumerate(["mm", "mm", "addmm"])]
    grouped = {r["cause"]: r["count"] for r in group(rows)}
    assert grouped == {"fakegpu has no kernel for aten::mm": 2,
                       "fakegpu has no kernel for aten::addmm": 1}


class OperatorNotFound(Exception):
    """A backend's own exception class (defined outside torch, the suite and Python)."""


def test_an_exception_of_the_backends_own_class_names_the_op_it_cannot_run():
    from amp_conformance.plugin.missing_kernels import refused_op

    own = OperatorNotFound("Operator with name aten::_amp_update_scale_ has no lowering")
    assert refused_op(own) == "aten::_amp_update_scale_"
    try:  # raised from: the chain is read
        raise ValueError("step failed") from own
    except ValueError as wrapped:
        assert refused_op(wrapped) == "aten::_amp_update_scale_"
    # torch's, the suite's and Python's own exceptions are never the backend's words
    assert refused_op(RuntimeError("aten::mm: shapes cannot be multiplied")) is None
    assert refused_op(ConformanceFailure("torch.mm raised at aten::mm")) is None
    assert refused_op(OperatorNotFound("no lowering for this op")) is None  # names no op


def test_an_op_the_backend_cannot_run_in_its_own_words_is_one_cause_per_op():
    """Recognised by behaviour (the entry's call raises outside autocast too), whatever the
    backend's exception class and wording: one row per op, its words in the example."""
    rows = [{"nodeid": f"t::{i}[{op}]", "outcome": "failed", "op": op,
             "message": f"pymode cannot run aten::{op} (outside autocast too): OperatorNotFound: "
                        f"Operator with name aten::{op} has no lowering (id {i})\n..."}
            for i, op in enumerate(["convolution", "convolution", "mm"])]
    grouped = {r["cause"]: (r["count"], r["example"]) for r in group(rows)}
    assert grouped["pymode cannot run aten::convolution (outside autocast too)"][0] == 2
    assert grouped["pymode cannot run aten::mm (outside autocast too)"] == (
        1, "pymode cannot run aten::mm (outside autocast too): OperatorNotFound: Operator with "
           "name aten::mm has no lowering (id 2)")


@needs_python_backend
@pytest.mark.parametrize("select,lacking,outcome,says", [
    ("torch_16-mm", "mm", "failed",
     "fakegpu has no kernel for aten::mm, an op of its autocast policy"),
    ("test_gradscaler_update_kernel and not meta and not property", "_amp_update_scale_",
     "skipped",
     "not applicable: fakegpu has no kernel for aten::_amp_update_scale_, which this check "
     "needs as a tool"),
], ids=["policy-op", "tool"])
def test_a_backend_without_a_kernel_gets_the_named_cause(select, lacking, outcome, says):
    done = _example("-m", "pytest", "-p", "no:randomly", "-rs", "--pyargs",
                    "amp_conformance.suite", "-k", select, env={"FAKEGPU_NO_KERNEL": lacking})
    counts = _summary_counts(done.stdout)
    assert counts.get(outcome) and not counts.get("failed" if outcome == "skipped" else "passed"), (
        done.stdout[-3000:])
    assert says in done.stdout, done.stdout[-3000:]
    if outcome == "failed":
        assert re.search(rf"\d+ × {re.escape(says.split(',')[0])}\n", done.stdout)
