"""The backward check catches broken gradients through autocast, passes on torch's own, and
the fake tier checks the casts of calls that fail below autocast (checks/fake_casts.py).

Broken kernels are Python overrides of an ``Autocast<Device>`` kernel, destroyed after
each test (which restores PyTorch's own); all in-process, on small op-list entries.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from amp_conformance.checks import fake_casts
from amp_conformance.checks.backward import check as backward
from amp_conformance.checks.backward import mutants as mutants_backward
from amp_conformance.checks.case import Case
from amp_conformance.checks.mutation import keep_dtype, override_kernel
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpListError

CATALOGUE = mutants()


def _case(device: str, entry_id: str, dtype: torch.dtype = torch.bfloat16, fake: bool = False,
          numerics: str = "bitwise") -> Case:
    entry = next(e for e in oplist.load(device).entries if e.id == entry_id)
    return Case(Target(device, fake=fake), dtype, entry, numerics)


@contextlib.contextmanager
def overridden(op: str, key: str, factory: Callable) -> Iterator[None]:
    undo = override_kernel(op, key, factory)
    try:
        yield
    finally:
        undo()


# -- torch's own kernels conform --------------------------------------------------------


@pytest.mark.parametrize("entry_id", ["mm", "linear", "conv2d", "cat", "index_copy", "add",
                                      "scaled_dot_product_attention"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_passes_on_torch_kernels(entry_id, dtype):
    case = _case("cpu", entry_id, dtype)
    assert backward.not_applicable(case) is None
    backward.check_backward(case)


def test_close_mode_passes_too_and_state_is_restored():
    before = AutocastState.capture("cpu")
    determinism = torch.are_deterministic_algorithms_enabled()
    backward.check_backward(_case("cpu", "mm", numerics="close"))
    backward.check_backward(_case("cpu", "mm"))
    assert AutocastState.capture("cpu") == before
    assert torch.are_deterministic_algorithms_enabled() == determinism


# -- broken kernels are caught ------------------------------------------------------------


@pytest.mark.parametrize("mutant, words", [
    ("mm-cast-detached", ["output 0 (torch.bfloat16) of torch.mm under autocast carries no "
                          "gradient", "no gradient reaches args[0] (torch.float32)"]),
    ("mm-grad-one-ulp-off", ["the gradient of args[0] (autocast vs hand-cast control): not "
                             "equal (bitwise)", "Mismatched elements"]),
    ("mm-grad-in-autocast-dtype", ["the gradient of args[0] is torch.bfloat16, expected its "
                                   "input's dtype torch.float32", "it was cast in place"]),
])
def test_broken_gradients_are_caught(mutant, words):
    assert CATALOGUE[mutant].apply is not None, mutants_backward.__name__  # registered
    case = _case("cpu", "mm")
    undo = CATALOGUE[mutant].apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            backward.check_backward(case)
    finally:
        undo()
    message = str(info.value)
    for w in [*words, "torch.mm [entry mm", "on cpu, autocast dtype torch.bfloat16", "reproduce:"]:
        assert w in message, message
    backward.check_backward(case)  # restored


def test_close_mode_tolerates_one_ulp_but_not_a_cut_graph():
    case = _case("cpu", "mm", numerics="close")
    undo = CATALOGUE["mm-grad-one-ulp-off"].apply()
    try:
        backward.check_backward(case)
    finally:
        undo()
    undo = CATALOGUE["mm-cast-detached"].apply()
    try:
        with pytest.raises(ConformanceFailure, match="carries no gradient"):
            backward.check_backward(case)
    finally:
        undo()


def test_a_permuted_gradient_is_caught_by_the_random_weights():
    """A kernel whose backward swaps gradient rows passes a plain .sum() of equal rows'
    contributions; the fixed-seed weighting sees it."""
    class Flipped(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.mm(a, b)

        @staticmethod
        def backward(ctx, grad):
            a, b = ctx.saved_tensors
            return grad.mm(b.t()).flip(0), a.t().mm(grad)

    def factory(redispatch):
        def kernel(a, b):
            with torch._C._ExcludeDispatchKeyGuard(
                    torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
                return Flipped.apply(a.to(torch.bfloat16), b.to(torch.bfloat16))
        return kernel

    with overridden("mm", "AutocastCPU", factory):
        with pytest.raises(ConformanceFailure, match="the gradient of args\\[0\\]"):
            backward.check_backward(_case("cpu", "mm"))


def test_reproduction_runs_and_prints_both_gradients():
    source = backward.reproduction(_case("cpu", "mm"), "torch.mm")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("\n".join(line[4:] for line in source.splitlines()), "<repro>", "exec"), {})
    assert "tensor(" in out.getvalue() and "grad_fn" not in out.getvalue()


# -- what does not apply, said in data ---------------------------------------------------------


@pytest.mark.parametrize("device, entry_id, fake, words", [
    ("cuda", "mm", True, "autograd on fake tensors"),
    ("cuda", "binary_cross_entropy", False, "a banned op"),
    ("cpu", "eq", False, "is not differentiable here: a comparison"),
    ("cpu", "_addmm_activation", False, "derivative for aten::_addmm_activation is not "
                                        "implemented"),
    ("cpu", "avg_pool3d", False, "no float32 input"),
])
def test_not_applicable_reasons(device, entry_id, fake, words):
    reason = backward.not_applicable(_case(device, entry_id, torch.float16, fake=fake))
    assert reason is not None and words in reason, reason


def test_the_backward_field(tmp_path: Path):
    def entry(value: str) -> oplist.Entry:
        path = tmp_path / "l.toml"
        path.write_text('[list]\ndevice = "cpu"\n[[entry]]\nid = "x"\nop = "mm"\n'
                        f'category = "torch_16"\nargs = [{{shape = [2, 2]}}, {{shape = [2, 2]}}]\n'
                        f"{value}\n")
        return oplist.read_file(path)[1][0]

    assert entry("").backward is None and entry("backward = true").backward is None
    assert entry('backward = "integer output"').backward == "integer output"
    for bad in ("backward = false", 'backward = ""', "backward = 1"):
        with pytest.raises(OpListError, match="field 'backward'"):
            entry(bad)


def test_an_unmarked_non_differentiable_entry_fails_saying_how_to_mark_it():
    case = _case("cpu", "eq")
    with pytest.raises(ConformanceFailure, match='mark the entry backward = "<the error>"'):
        backward.check_backward(case)


# -- the fake tier: casts checked where the call fails below autocast -------------------------


@pytest.mark.parametrize("absent_device", [("mps",), ("xpu",)], ids=["mps", "xpu"], indirect=True)
def test_fake_sdpa_passes_on_its_casts_and_fails_without_them(absent_device):
    """sdpa raises below autocast under --fake (no backend stub in a CPU build): the policy
    check passes on the casts AutocastMPS/XPU made first, and fails when its kernel casts
    nothing (pytorch#141774: sdpa missing from AutocastMPS). Needs the device absent here,
    with fake tensors of it (skips, saying why, where not)."""
    device = absent_device
    case = _case(device, "scaled_dot_product_attention", torch.float16, fake=True)
    observed: dict = {}
    check_policy(case, observed)
    (seen,) = observed.values()
    assert "cast args[0], args[1], args[2] to torch.float16, then raised" in seen, seen
    key = f"Autocast{device.upper() if device == 'xpu' else 'MPS'}"
    undo = keep_dtype("scaled_dot_product_attention", key)()
    try:
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    finally:
        undo()
    message = str(info.value)
    assert "args[0] (torch.float32) was not cast to torch.float16 before the call raised " \
           "(never cast)" in message, message
    assert "An unexpected device type was provided" in message and f"{device} (fake)" in message
    check_policy(case)  # restored


def test_fake_casts_of_the_wrong_dtype_fail():
    case = _case("mps", "scaled_dot_product_attention", torch.float16, fake=True)

    def factory(redispatch):
        return lambda q, k, v, *rest, **kw: redispatch(q.bfloat16(), k.bfloat16(), v.bfloat16(),
                                                       *rest, **kw)

    with overridden("scaled_dot_product_attention", "AutocastMPS", factory):
        with pytest.raises(ConformanceFailure, match=r"was not cast to torch.float16 before the "
                                                     r"call raised \(torch.bfloat16\)"):
            check_policy(case)


def test_other_errors_under_fake_still_fail():
    """Only the listed limits of the fake tier are read as such."""
    case = _case("mps", "scaled_dot_product_attention", torch.float16, fake=True)

    def factory(redispatch):
        def kernel(*args, **kwargs):
            raise RuntimeError("a kernel bug")
        return kernel

    with overridden("scaled_dot_product_attention", "AutocastMPS", factory):
        with pytest.raises(ConformanceFailure, match="raised inside autocast: RuntimeError: a "
                                                     "kernel bug"):
            check_policy(case)
    assert fake_casts.limit_of(RuntimeError("a kernel bug")) is None


@pytest.mark.parametrize("absent_device, entry_id", [
    (("cuda",), "cudnn_convolution"), (("cuda", "xpu"), "gru_cell"),
    (("cuda", "xpu", "mps"), "grid_sampler"), (("cuda", "xpu", "mtia"), "_thnn_fused_gru_cell"),
    (("mps",), "_mps_convolution"),
], indirect=["absent_device"], ids=lambda v: v if isinstance(v, str) else "/".join(v))
def test_fake_fallbacks_to_an_absent_device_are_checked_by_their_casts(absent_device, entry_id):
    """Entries whose fake call falls back to the real device after autocast's casts (their
    fake skips still switch the items off: these calls bypass the skips). The device must
    be absent here (where it is not, the fallback runs on it): the first of the devices
    whose list has the entry that is absent, else the item skips saying why."""
    observed: dict = {}
    check_policy(_case(absent_device, entry_id, torch.float16, fake=True), observed)
    (seen,) = observed.values()
    assert "then raised (a limit of the fake tier" in seen, seen
