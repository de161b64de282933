"""No excuse without proof (plugin/excuses.py): a failure is excused (a limit, a kernel a
check needs as a tool, a transform's own departure) only where the same call fails the
same way with autocast disabled; each excuse is counted and shown, and a failure leaves
nothing behind for later items.

The adversarial backend (tests/backends/amp_faulty.py) ships wrong autocast dressed as
each excuse; every fault must fail its items and the run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from amp_conformance.core import sync
from amp_conformance.core.errors import ConformanceFailure, same_way, signature
from amp_conformance.core.state import ItemState
from amp_conformance.plugin.excuses import DirtyDevice, autocast_disabled, clean_start
from amp_conformance.plugin.items import START_STATE
from tests import backends
from tests.test_vendor_workflow import _summary_counts, needs_python_backend

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fakegpu"
NO_KERNEL = ("Could not run 'amp_faulty::fused_gemm' with arguments from the 'PrivateUse1' "
             "backend. This could be because the operator doesn't exist for this backend")


class FakeGpuError(RuntimeError):
    """A backend's own class."""


def test_the_same_way_is_the_same_class_op_and_telling_line():
    first = NotImplementedError(NO_KERNEL + " (id 1)")
    assert same_way(first, NotImplementedError(NO_KERNEL + " (id 2)"))  # numbers masked
    assert not same_way(first, RuntimeError(NO_KERNEL))  # another class
    assert not same_way(first, NotImplementedError(NO_KERNEL.replace("fused_gemm", "mm")))
    # a check's verdict: its first line introduces, the next tells
    verdict = ConformanceFailure("torch.mm [entry mm] on fakegpu, backward:\n  no gradient")
    other = ConformanceFailure("torch.mm [entry mm] on fakegpu, backward:\n  the gradient differs")
    assert signature(verdict) != signature(other) and not same_way(verdict, other)
    # raised from, or quoted by the check that met it
    try:
        raise ConformanceFailure("the scaler's update failed") from FakeGpuError(NO_KERNEL)
    except ConformanceFailure as wrapped:
        assert same_way(wrapped, FakeGpuError(NO_KERNEL))
    quoted = ConformanceFailure(f"torch.mm raised FakeGpuError: {NO_KERNEL}")
    assert same_way(quoted, FakeGpuError(NO_KERNEL))


def test_autocast_disabled_keeps_every_region_of_the_device_off_and_no_other():
    with autocast_disabled("cpu"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not torch.is_autocast_enabled("cpu")
            assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.float32
        torch.set_autocast_enabled("cuda", True)
        assert torch.is_autocast_enabled("cuda")
        torch.set_autocast_enabled("cuda", False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.bfloat16


LEAK = """
import pytest, torch
from torch._C import DispatchKey

pytestmark = pytest.mark.amp_check("policy")

def _print_like_torch():
    guard = torch._C._DisableFuncTorch()  # what torch's tensor printing holds while it prints
    raise RuntimeError('"abs" not implemented for \\'Half\\'')

def test_a_failure_raised_while_printing():
    _print_like_torch()

def test_the_next_item_runs_with_torch_func():
    assert not torch._C._dispatch_tls_is_dispatch_key_excluded(
        DispatchKey.FuncTorchDynamicLayerFrontMode)
    x = torch.ones(3)
    assert torch.equal(torch.func.grad(lambda t: (t * t).sum())(x), 2 * x)

def test_a_mode_left_entered():
    torch._C._dispatch_tls_set_dispatch_key_excluded(DispatchKey.FuncTorchDynamicLayerFrontMode,
                                                     True)
"""


def test_a_failure_leaves_nothing_behind_and_a_leak_is_named(pytester):
    """The failure's traceback (which pytest keeps) held a guard that turns torch.func off:
    the next item runs as it would alone; an item that passes but leaves what cannot be let
    go fails, naming it, and it is restored."""
    pytester.makepyfile(test_leak=LEAK)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 2 and outcomes.get("passed") == 1, result.stdout.str()
    assert not outcomes.get("errors"), result.stdout.str()
    result.stdout.fnmatch_lines(["*state leaked by test_leak.py::test_a_mode_left_entered: "
                                 "dispatch keys excluded: +FuncTorchDynamicLayerFrontMode "
                                 "(restored*"])
    assert "test_the_next_item_runs_with_torch_func" not in "".join(
        line for line in result.stdout.lines if line.startswith("FAILED"))


# -- the adversarial backend ------------------------------------------------------------


def _faulty(tmp_path: Path, fault: str, select: str, *extra: str) -> tuple[dict, str]:
    done = backends.run(
        "-m", "pytest", "--pyargs", "amp_conformance.suite", "--backend-module", "amp_faulty",
        "--device", "fakegpu", f"--oplist={EXAMPLE / 'fakegpu.toml'}",
        f"--capabilities={EXAMPLE / 'capabilities.toml'}", "-p", "no:cacheprovider",
        "-p", "no:randomly", "-q", "-k", select, "--conformance-report", "r.json", *extra,
        cwd=tmp_path, env={"AMP_FAULT": fault})
    out = done.stdout + done.stderr
    assert "Traceback (most recent call last)" not in out, out[-3000:]
    return json.loads((tmp_path / "r.json").read_text()), out


@pytest.mark.slow
@needs_python_backend
@pytest.mark.parametrize("fault, select, says", [
    ("lowering", "test_region_sets_and_restores_state or test_cast_inputs",
     "not excused (missing kernel): fakegpu has no kernel for amp_faulty::fused_gemm"),
    ("own_words", "test_numerics and torch_16-mm or test_cast_inputs",
     "not excused (missing kernel): fakegpu cannot run aten::_to_copy"),
    ("mul_raises", "test_cast_inputs or test_functional_call",
     "not excused (missing kernel): fakegpu cannot run aten::mul.Tensor"),
    ("detach", "test_backward and torch_16",
     "not excused (limit): fakegpu limit: autograd does not reach its tensors"),
], ids=["a-lowering-only-autocast-uses", "own-words-naming-another-op", "an-op-left-alone",
        "the-probe-fooled"])
def test_wrong_autocast_buys_no_excuse(tmp_path, fault, select, says):
    """Each fault's items fail, refused their excuse with the evidence (the item passes
    with autocast disabled, or fails otherwise), and the run fails; no excuse granted."""
    data, out = _faulty(tmp_path, fault, select)
    assert data["run"]["exitstatus"] == 1, out[-3000:]
    failed = [r for r in data["results"] if r["outcome"] == "failed"]
    assert failed and any(r["message"].startswith(says) for r in failed), out[-3000:]
    assert data["excused"]["count"] == 0, data["excused"]
    assert not [r for r in data["results"] if r["outcome"] == "skipped"
                and says.split(": ", 1)[1] in (r["message"] or "")]


@pytest.mark.slow
@needs_python_backend
def test_a_dtype_departure_under_vmap_is_not_excused_by_a_value_quirk(tmp_path):
    data, out = _faulty(tmp_path, "vmap_bmm", "test_transform and vmap-torch_16")
    (item,) = data["results"]
    assert item["outcome"] == "failed", out[-3000:]
    assert re.search(r"torch\.mm \[entry mm\]: output dtypes \['float32'\], untransformed "
                     r"\['float16'\]", item["message"]), item["message"]


@pytest.mark.slow
@needs_python_backend
def test_a_tensor_that_cannot_be_printed_fails_its_item_and_nothing_more(tmp_path):
    """The device's abs runs in float32 only: the items mm's off autocast fails build their
    messages on the host, and every later item's verdict is its verdict alone."""
    transforms = "test_transform or test_functional_call"
    after, out = _faulty(tmp_path, "abs_half", f"test_numerics or test_properties or {transforms}")
    alone, _ = _faulty(tmp_path, "abs_half", transforms)
    verdicts = {r["nodeid"]: r["outcome"] for r in alone["results"]}
    assert verdicts == {r["nodeid"]: r["outcome"] for r in after["results"]
                        if r["nodeid"] in verdicts}, out[-3000:]
    failed = [r for r in after["results"] if r["outcome"] == "failed"]
    assert failed and not [r for r in failed if "abs_fakegpu" in (r["message"] or "")]
    assert "state leaked" not in out


@pytest.mark.slow
@needs_python_backend
def test_an_excuse_is_counted_shown_and_refused_on_request(tmp_path):
    """A kernel a check needs as a tool, lacking without autocast too: excused, counted on
    the verdict line with its evidence; --amp-no-excuses fails it instead."""
    select = "test_gradscaler_update_kernel and not meta and not property"
    env = {"FAKEGPU_NO_KERNEL": "_amp_update_scale_"}
    args = ("-m", "pytest", "--pyargs", "amp_conformance.suite", "-p", "no:randomly", "-q",
            "-k", select, f"--conformance-report={tmp_path / 'r.json'}")
    done = backends.run(*args, cwd=EXAMPLE, env=env)
    data = json.loads((tmp_path / "r.json").read_text())
    counts = _summary_counts(done.stdout)
    assert counts.get("skipped") and not counts.get("failed"), done.stdout[-3000:]
    assert data["excused"]["by_mechanism"] == {"missing kernel": counts["skipped"]}
    assert all("fails the same way" in i["evidence"] for i in data["excused"]["items"])
    assert f"{counts['skipped']} items excused: missing kernels {counts['skipped']}" in (
        done.stdout)
    refused = backends.run(*args, "--amp-no-excuses", cwd=EXAMPLE, env=env)
    assert _summary_counts(refused.stdout).get("failed") == counts["skipped"], refused.stdout[-3000:]
    assert "excuse refused by --amp-no-excuses (missing kernel)" in refused.stdout


# -- faults of state: a proof starts clean, a leak and a late error are the item's -------


@pytest.mark.slow
@needs_python_backend
@pytest.mark.parametrize("fault, says", [
    ("error_state", "fakegpu reported an error after the item failed (FakeGpuError: fakegpu: an "
                    "illegal memory access was encountered): an item that leaves its device "
                    "failing is never excused"),
    ("error_twice", "an item that leaves its device failing is never excused"),
    ("grad_leak", "state leaked by test_oplist.py::test_policy[fakegpu-bfloat16-torch_16-mm]: "
                  "grad mode: True before, False after"),
    ("late_error", "the device reported an error after test_oplist.py::test_policy[fakegpu-"
                   "bfloat16-torch_16-mm] ran: FakeGpuError: fakegpu: an illegal memory access"),
], ids=["an-error-state-drained-first", "an-error-state-that-survives-a-synchronize",
        "a-leaked-grad-mode", "an-error-reported-late"])
def test_a_fault_of_state_fails_its_items_and_the_run(tmp_path, fault, says):
    """mm's autocast kernel leaves the device in an error state (its later kernels, the
    item's read-back among them, raise it until a synchronize), turns grad mode off, or
    has an error reported at the next synchronize. The proof drains the device and starts
    from the state the item started from, so no rerun meets what the failure left; the
    leak and the late error fail the item that made them."""
    data, out = _faulty(tmp_path, fault, "torch_16-mm")
    assert data["run"]["exitstatus"] == 1, out[-3000:]
    assert data["excused"]["count"] == 0, data["excused"]
    messages = [r["message"] or "" for r in data["results"] if r["outcome"] != "passed"]
    assert any(says in m for m in messages), "\n".join(m[:400] for m in messages)


@pytest.mark.slow
@needs_python_backend
def test_a_device_that_never_comes_back_is_lost_not_excused(tmp_path):
    data, out = _faulty(tmp_path, "error_sticky", "torch_16-mm")
    assert data["run"]["exitstatus"] == 6, out[-3000:]
    assert data["excused"]["count"] == 0, data["excused"]
    assert "DEVICE LOST during this item" in out


def _item_started_here(device: str = "cpu") -> SimpleNamespace:
    item = SimpleNamespace(stash=pytest.Stash())
    item.stash[START_STATE] = ItemState.capture(device)
    return item


def test_a_proof_starts_from_the_items_start_and_gives_the_failure_its_state_back():
    """The failure left grad mode off: the proof runs with it on, as the item started; after
    it the state is the failure's again, for the isolation to name."""
    item = _item_started_here()
    torch.set_grad_enabled(False)
    try:
        with clean_start(item, "cpu"):
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


@pytest.mark.parametrize("reported, says", [
    ([[RuntimeError("illegal access")], []], "cpu reported an error after the item failed "
                                              "(RuntimeError: illegal access): an item that "
                                              "leaves its device failing is never excused"),
    ([[RuntimeError("sticky")]] * 4, "still reports an error after 3 synchronizes"),
], ids=["drained", "never-clean"])
def test_no_proof_runs_on_a_device_the_item_left_failing(monkeypatch, reported, says):
    errors = iter(reported)
    monkeypatch.setattr(sync, "pending", lambda device: (next(errors) or [None])[0])
    with pytest.raises(DirtyDevice, match=re.escape(says)):
        with clean_start(_item_started_here(), "cpu"):
            pytest.fail("no proof runs")
