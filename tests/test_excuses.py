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

import pytest
import torch

from amp_conformance.core.errors import ConformanceFailure, same_way, signature
from amp_conformance.plugin.excuses import autocast_disabled
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
    the next item runs as it would alone; what an item leaves that cannot be let go is an
    error naming it, and is restored."""
    pytester.makepyfile(test_leak=LEAK)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 2, result.stdout.str()
    assert outcomes.get("errors") == 1, result.stdout.str()
    result.stdout.fnmatch_lines(["state leaked by test_leak.py::test_a_mode_left_entered: dispatch"
                                 " keys excluded: +FuncTorchDynamicLayerFrontMode (restored*"])
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
