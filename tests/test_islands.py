"""Float32 islands (checks/wrappers/island.py), region runners (runner.py) and every wrapper
on its own device's state alone (other_devices.py): declarations, the sound ones, each
planted bug caught naming its promise (on cpu and on a fake cuda device), the state left
as found."""

import contextlib
import dataclasses
import io
import re
import warnings

import pytest
import torch

from amp_conformance.checks.wrappers import (
    DeclarationError,
    failure,
    island,
    planted,
    planted_islands,
    planted_shapes,
    runner,
    validate,
)
from amp_conformance.checks.wrappers.cases import cases, not_applicable
from amp_conformance.checks.wrappers.declare import Float32Island, float32_body, tensor
from amp_conformance.checks.wrappers.fake_device import on_device
from amp_conformance.checks.wrappers.other_devices import check_devices
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target

SOUND = planted.REFERENCE[2]
CHECKS = {"float32": island.check_float32, "restored": island.check_restored,
          "nesting": island.check_nesting, "grad": island.check_grad,
          "numerics": island.check_numerics, "devices": check_devices}


def _case(decl, check, device="cpu", fake=False, dtype=torch.bfloat16):
    return next(c for c in cases([decl], device, (dtype,), fake) if c.check == check)


class Fp32Linear(torch.nn.Linear):
    """A module island: its linear computed in float32 whatever the region."""

    def forward(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


MODULE = Float32Island("test.fp32_linear", devices=("cpu",),
                       build=lambda d: Fp32Linear(8, 3).to(d))


@pytest.mark.parametrize("field,value,named", [
    ("build", None, "build"), ("context", planted.disabled, "build"),  # exactly one of them
    ("build", 3, "build"), ("returns", "output", "returns"), ("inputs", 3, "inputs"),
    ("reference", "float32", "reference")])
def test_a_bad_island_field_is_one_error_naming_it(field, value, named):
    decl = dataclasses.replace(MODULE, **{field: value})
    with pytest.raises(DeclarationError) as info:
        validate(decl)
    assert info.value.field == named and repr(MODULE.name) in str(info.value)


@pytest.mark.parametrize("decl", [SOUND, MODULE, planted.PLANTED[3]], ids=lambda d: d.name)
@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_sound_island_passes_and_leaves_the_state_as_found(decl, check, dtype):
    before = AutocastState.capture("cpu")
    CHECKS[check](_case(decl, check, dtype=dtype))
    assert before.diff(AutocastState.capture("cpu")) == []


BROKEN = [
    ("no_restore", "restored", failure.ISLAND_RESTORED, "after it returned: enabled: True before"),
    ("cache_on", "restored", failure.ISLAND_RESTORED, "cache_enabled: False before, True after"),
    ("reads_other", "devices", failure.READS_OTHER, "it reads {other}'s state"),
]


@pytest.mark.parametrize("device,fake", [("cpu", False), ("cuda", True)])
@pytest.mark.parametrize("bug,check,promise,detail", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_island_fails_naming_its_promise_and_the_device(bug, check, promise, detail,
                                                                device, fake):
    decl = dataclasses.replace(SOUND, name="broken", devices=("cpu", "cuda"),
                               context=planted.island_of(bug))
    before = AutocastState.capture("cpu")
    with pytest.raises(ConformanceFailure) as info:
        CHECKS[check](_case(decl, check, device, fake))
    message = str(info.value)
    assert f"broken promise: {promise}" in message
    assert detail.format(other="cpu" if device == "cuda" else "cuda") in message
    assert message.startswith(f"wrapper broken (torch {torch.__version__}) on {device}")
    assert before.diff(AutocastState.capture("cpu")) == []


def test_an_island_that_leaves_autocast_on_names_the_op_and_its_dtype():
    decl = dataclasses.replace(SOUND, name="leaky", context=lambda d: contextlib.nullcontext())
    with pytest.raises(ConformanceFailure, match=r"aten\.mm\.default computed in bfloat16"):
        island.check_float32(_case(decl, "float32"))


def test_an_island_that_casts_back_to_another_dtype_breaks_its_declared_return():
    decl = dataclasses.replace(planted.PLANTED[3], name="back", build=lambda d: planted.back_to_float16)
    with pytest.raises(ConformanceFailure, match=f"{failure.ISLAND_RETURNS}.*\n.*output float16; "
                       "declared returns='input': bfloat16"):
        island.check_float32(_case(decl, "float32"))


def test_a_region_that_reads_cudas_flag_is_named():
    decl = dataclasses.replace(planted.REFERENCE[0], name="reads", make=planted.nests_by_cuda_flag)
    case = next(c for c in cases([decl], "cpu", (torch.bfloat16,)) if c.check == "devices")
    with pytest.raises(ConformanceFailure, match="it reads cuda's state"):
        check_devices(case)


def test_a_region_that_enters_cudas_autocast_on_cpu_changes_cudas_state():
    """The factory of a trainer that enters torch.autocast("cuda") whatever the device."""
    def cuda_always(precision, device):
        return torch.autocast("cuda", dtype=planted.PRECISIONS[precision])
    decl = dataclasses.replace(planted.REFERENCE[0], name="cuda_always", make=cuda_always)
    case = next(c for c in cases([decl], "cpu", (torch.bfloat16,)) if c.check == "devices")
    # torch warns that CUDA is not available, on a host without it
    warns = contextlib.nullcontext() if torch.cuda.is_available() else pytest.warns(UserWarning)
    with warns, pytest.raises(ConformanceFailure) as info:
        check_devices(case)
    assert f"broken promise: {failure.CHANGES_OTHER}" in str(info.value)
    assert "it changed cuda's autocast state" in str(info.value)


def _leaves_bfloat16_only(x):
    """A helper that avoids bfloat16 regions alone (a float16 region stays as it is)."""
    leave = torch.get_autocast_dtype(x.device.type) == torch.bfloat16
    with torch.autocast(x.device.type, enabled=not leave):
        x = x.float()
        return x @ x.mT


BF16_ONLY = Float32Island("test.bf16_only", devices=("cpu",), build=lambda d: _leaves_bfloat16_only)


def test_an_island_declared_for_one_amp_dtype_is_checked_in_that_dtype_alone():
    assert island.check_float32(_case(BF16_ONLY, "float32")) is None
    with pytest.raises(ConformanceFailure, match="computed in float16"):
        island.check_float32(_case(BF16_ONLY, "float32", dtype=torch.float16))
    decl = dataclasses.replace(BF16_ONLY, amp_dtypes=(torch.bfloat16,))
    reasons = {c.amp_dtype: not_applicable(c, (torch.bfloat16, torch.float16), False)
               for c in cases([decl], "cpu", (torch.bfloat16, torch.float16))}
    assert reasons[torch.bfloat16] is None
    assert reasons[torch.float16] == ("not applicable: test.bf16_only leaves only bfloat16 "
                                      "regions (declared amp_dtypes)")


def _similarity_loss(a, b):
    """A float32 core, then arithmetic in the input's dtype by design (1 - similarity)."""
    with torch.autocast(a.device.type, enabled=False):
        score = torch.cosine_similarity(a.float(), b.float(), dim=-1).mean()
    return 1 - score.to(a.dtype)


def _similarity_in_region(a, b):
    score = torch.cosine_similarity(a, b, dim=-1).mean()  # the bug: the core in the region
    return 1 - score.to(a.dtype)


def _pair(device):
    return tensor(4, 8, device=device), tensor(4, 8, device=device, seed=6)


@pytest.mark.parametrize("check", ["float32", "nesting", "devices", "numerics"])
def test_an_island_with_a_declared_ending_holds_the_core_to_float32(check):
    loss = Float32Island("test.loss", devices=("cpu",), build=lambda d: _similarity_loss,
                         inputs=_pair, returns="input")
    with pytest.raises(ConformanceFailure, match=r"aten\.rsub\.Scalar computed in bfloat16"):
        island.check_float32(_case(loss, "float32"))
    ending = dataclasses.replace(loss, ending="input")
    CHECKS[check](_case(ending, check))
    broken = dataclasses.replace(ending, build=lambda d: _similarity_in_region)
    if check == "float32":
        with pytest.raises(ConformanceFailure, match="before its float32 core ended"):
            island.check_float32(_case(broken, check))


class CastsInRegionOnly(torch.nn.Linear):
    """A module that casts only inside a region: fed bfloat16 outside one, its matmul
    rightly refuses (mat1 and mat2 must have the same dtype)."""

    def forward(self, x):
        if not torch.is_autocast_enabled(x.device.type):
            return super().forward(x)
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x.float())


@pytest.mark.parametrize("check", list(CHECKS))
def test_an_island_is_fed_only_inputs_it_can_meet(check):
    decl = Float32Island("test.in_region_only", devices=("cpu",),
                         build=lambda d: CastsInRegionOnly(8, 3).to(d))
    CHECKS[check](_case(decl, check))


def _leaves_through_cuda(x):
    """The bug: a first call outside the region, then CUDA's autocast switched off, not the
    device's (a no-op on CPU, a change to CUDA's state)."""
    x = x.float()
    with torch.autocast("cuda", enabled=False):
        return (x @ x.mT).float()


def test_devices_looks_at_every_call_inside_an_island():
    decl = Float32Island("test.through_cuda", devices=("cpu",),
                         build=lambda d: _leaves_through_cuda)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.autocast("cuda") without CUDA warns
        with pytest.raises(ConformanceFailure) as info:
            check_devices(_case(decl, "devices"))
    assert "it changed cuda's autocast state" in str(info.value)
    assert "in a region, inside the island, at call 2 (mT): cuda reads enabled=False" \
        in str(info.value)


def _routing(s):
    """Coordinate-descent routing as a linear-attention library writes it: outside autocast,
    in the scores' dtype (no upcast), ``k`` made with the legacy constructor, and
    ill-conditioned (``exp`` of a sum divided by 0.1, twenty iterations)."""
    with torch.autocast(s.device.type, enabled=False):
        logk, a, b = torch.Tensor([4.0]).to(s).log(), 0, -s
        for _ in range(20):
            a = 0.1 * (logk - ((s + b) / 0.1).logsumexp(dim=-1, keepdim=True))
            b = -torch.nn.functional.relu(s + a)
        return ((s + a + b) / 0.1).exp()


ROUTING = Float32Island("test.routing", devices=("cpu",), build=lambda d: _routing,
                        inputs=lambda d: (tensor(2, 16, device=d),), core="input",
                        returns="input")


@pytest.mark.parametrize("check", ["float32", "grad", "numerics", "devices"])
def test_an_ill_conditioned_island_in_its_inputs_dtype_is_held_to_that_computation(check):
    """Its values and gradients are compared with the same computation in the input's dtype
    outside autocast (what it promises), not with float32's, from which bfloat16's rounding
    drifts far here; the legacy constructor's lift, made below the dispatcher where every
    autocast flag reads False, is not taken for a change of other devices' states."""
    CHECKS[check](_case(ROUTING, check))


class IndexedFp32Linear(torch.nn.Module):
    """A module island as libraries write them: parameters made on the device, moved with
    ``.to``, inputs indexed, and its own float32 cast."""

    def __init__(self, device):
        super().__init__()
        self.proj = torch.nn.Linear(8, 3, device=device)
        self.norm = torch.nn.LayerNorm(3).to(device).float()

    def forward(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return self.norm(self.proj(x[:, None][..., 0, :].float()))[0]


@pytest.mark.parametrize("check", ["float32", "restored", "nesting", "devices"])
def test_on_a_fake_device_a_module_is_built_moved_and_indexed_as_on_the_device(check):
    decl = Float32Island("test.indexed", devices=("cpu", "cuda"), build=IndexedFp32Linear)
    CHECKS[check](_case(decl, check))
    CHECKS[check](_case(decl, check, "cuda", fake=True))


def _enters_cuda_bf16(x):
    """The bug: enters CUDA's autocast (on) where it meant to leave it; without CUDA the
    region disables itself and the island looks sound."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x = x.float()
        return x @ x.mT


def test_on_a_fake_cuda_device_cuda_looks_available_in_every_check():
    decl = Float32Island("test.enters_cuda", devices=("cuda",), build=lambda d: _enters_cuda_bf16)
    with pytest.raises(ConformanceFailure, match=r"aten\.mm\.default computed in bfloat16"):
        island.check_float32(_case(decl, "float32", "cuda", fake=True))


class ForgetsTheCast(torch.nn.Linear):
    def forward(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return super().forward(x)  # the bug: x not cast to float32


def test_a_fake_matmul_of_two_dtypes_raises_as_the_kernel_does():
    decl = Float32Island("test.no_cast", devices=("cpu", "cuda"),
                         build=lambda d: ForgetsTheCast(8, 3).to(d))
    with pytest.raises(RuntimeError, match="same dtype"):
        island.check_float32(_case(decl, "float32"))
    with pytest.raises(RuntimeError, match="expected both operands to have the same dtype"):
        island.check_float32(_case(decl, "float32", "cuda", fake=True))
    # its weights left on the host: the device's own error is the device mismatch
    stays = Float32Island("test.stays_on_host", devices=("cuda",),
                          build=lambda d: ForgetsTheCast(8, 3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        island.check_float32(_case(stays, "float32", "cuda", fake=True))


def test_what_a_fake_device_cannot_do_is_a_named_skip():
    def asks_a_value(x):
        torch.cuda.current_device()  # the device answers: one device, index 0
        if x.sum() > 0:  # a value decides: fake tensors carry none
            return x.float()
        return x.float() * 2
    decl = Float32Island("test.asks", devices=("cuda",), build=lambda d: asks_a_value)
    with pytest.raises(NotApplicable, match=r"not applicable on a fake device: tests/"
                       r"test_islands\.py:\d+ \(asks_a_value\): if x\.sum\(\) > 0:"):
        island.check_float32(_case(decl, "float32", "cuda", fake=True))


def test_on_a_fake_device_an_island_skips_grad_and_numerics_with_why():
    reasons = {c.check: not_applicable(c, (torch.bfloat16,), True)
               for c in cases([SOUND], "cuda", (torch.bfloat16,), fake=True)}
    assert "autograd on fake cuda" in reasons["grad"]
    assert "carry no values" in reasons["numerics"]
    assert not any(reasons[c] for c in ("float32", "restored", "nesting", "devices"))


def test_the_default_input_is_seeded_and_fake_inside_fake_tensor_mode():
    assert torch.equal(tensor(4, 8, device="cpu"), tensor(4, 8, device="cpu"))
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        assert isinstance(tensor(4, 8, device="cpu"), FakeTensor)
    assert float32_body(tensor(4, 8, device="cpu")).dtype == torch.float32


# -- region runners (checks/wrappers/runner.py) ------------------------------------------

RUNNER = planted.REFERENCE[3]
RUNNER_CHECKS = {"state": runner.check_state, "restored": runner.check_restored,
                 "nesting": runner.check_nesting, "devices": check_devices}


@pytest.mark.parametrize("check", list(RUNNER_CHECKS))
def test_a_sound_runner_passes_every_check(check):
    before = AutocastState.capture("cpu")
    for case in cases([RUNNER], "cpu", (torch.bfloat16, torch.float16)):
        if case.check == check:
            RUNNER_CHECKS[check](case)
    assert before.diff(AutocastState.capture("cpu")) == []


def _swallows(body, precision, device):
    with torch.autocast(device, dtype=planted.PRECISIONS[precision]):
        try:
            return body()
        except Exception:  # noqa: BLE001 - the bug
            return None


@pytest.mark.parametrize("runs,check,promise,detail", [
    (planted.run_in_cuda_region, "state", failure.RUNS_STATE,
     "the body ran with enabled=False, dtype=bfloat16; expected enabled=True, dtype=bfloat16"),
    (planted.run_in_cuda_region, "nesting", failure.RUNS_NESTED, "inside torch.autocast('cpu', "
     "enabled=False): the body ran with enabled=False"),
    (planted.run_in_cuda_region, "devices", failure.CHANGES_OTHER, "it changed cuda's autocast"),
    (_swallows, "restored", failure.RESTORED, "the exception the body raised did not reach"),
], ids=["state", "nesting", "devices", "restored"])
def test_a_broken_runner_fails_naming_its_promise(runs, check, promise, detail):
    decl = dataclasses.replace(RUNNER, name="broken", runs=runs)
    case = next(c for c in cases([decl], "cpu", (torch.bfloat16,)) if c.check == check
                and c.amp_dtype == torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.autocast("cuda") without CUDA warns
        with pytest.raises(ConformanceFailure) as info:
            RUNNER_CHECKS[check](case)
    assert f"broken promise: {promise}" in str(info.value) and detail in str(info.value)


def _loads_then_breaks(body, precision, device):
    """A training loop's step that draws its batch from a DataLoader (whose base seed is read
    with item(): a number without a value on a fake device) and then breaks by itself."""
    next(iter(torch.utils.data.DataLoader([0.0, 1.0], batch_size=2)))
    with torch.autocast(device, dtype=planted.PRECISIONS[precision]):
        body()
    raise ValueError("the library's own bug, after the forward")


@pytest.mark.parametrize("device,fake", [("cpu", False), ("cuda", True)])
def test_a_librarys_own_error_after_an_item_is_its_failure_on_a_fake_device(device, fake):
    """A number without a value excuses only what it decides or a torch call it reaches:
    the library's own error after it is the library's, on a fake device as on cpu."""
    decl = dataclasses.replace(RUNNER, name="breaks", runs=_loads_then_breaks,
                               devices=("cpu", "cuda"))
    case = next(c for c in cases([decl], device, (torch.bfloat16,), fake)
                if c.check == "restored")
    with pytest.raises(ValueError, match="the library's own bug"), \
            on_device(Target(device, fake)):
        runner.check_restored(case)


class CodebookOfItsSize(torch.nn.Module):
    """A quantizer whose codebook's size is read with item() and then made with arange (as
    vector-quantize-pytorch's FSQ does): on a fake device the size has no value."""

    def __init__(self, device):
        super().__init__()
        levels = torch.tensor([3, 3], device=device)
        self.codebook = torch.arange(levels.prod().item(), device=device).float()

    def forward(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return x.float() * self.codebook.mean()


class BadCallOfItsSize(CodebookOfItsSize):
    """The size given to a call that fails whatever the number (operands of two shapes):
    the library's own error, not the missing value's."""

    def __init__(self, device):
        torch.nn.Module.__init__(self)
        levels = torch.tensor([3, 3], device=device)
        self.codebook = torch.ones(8, device=device).add(torch.ones(3, device=device),
                                                         alpha=levels.prod().item())


def test_a_torch_call_that_fails_whatever_the_number_is_the_librarys_error():
    decl = Float32Island("test.bad_codebook", devices=("cuda",), build=BadCallOfItsSize)
    with pytest.raises(RuntimeError, match="broadcast"):
        _checked(decl, "float32", "cuda", True, torch.bfloat16)


def test_a_torch_call_given_a_number_without_a_value_is_a_named_skip():
    decl = Float32Island("test.codebook", devices=("cuda",), build=CodebookOfItsSize)
    with pytest.raises(NotApplicable, match=r"arange\(\) was given the number Tensor.item\(\) "
                       r"gave at tests/test_islands\.py:\d+ \(__init__\).*which has no value"):
        _checked(decl, "float32", "cuda", True, torch.bfloat16)


def test_on_a_fake_cuda_device_a_region_factory_is_held_to_cudas_state_alone():
    """torch.autocast("cuda") is made to enter as on a GPU (without one it disables itself);
    a region that asks CPU's flag is named."""
    sound = dataclasses.replace(planted.REFERENCE[0], devices=("cpu", "cuda"))
    case = next(c for c in cases([sound], "cuda", (torch.bfloat16,), fake=True)
                if c.check == "devices" and c.amp_dtype == torch.bfloat16)
    check_devices(case)

    def reads_cpu(precision, device):
        if torch.is_autocast_enabled("cpu"):
            return contextlib.nullcontext()
        return planted.autocast_region(precision, device)
    broken = dataclasses.replace(case, wrapper=dataclasses.replace(sound, make=reads_cpu))
    with pytest.raises(ConformanceFailure, match="it reads cpu's state"):
        check_devices(broken)


# the island shapes library code has (issue 57): a part after the core in the caller's
# region, work before the core in the input's dtype, inputs declared per argument
SHAPES = planted_islands.PLANTED
SHAPE_BUGS = [("island_region", planted_islands.cholesky_in_region, "float32",
               "before its float32 core ended"),
              ("island_region", planted_islands.ending_in_bfloat16, "nesting",
               "after its float32 core"),
              ("island_before", planted_islands.projected_in_region, "float32",
               "before its float32 core"),
              ("island_arguments", planted_islands.scale_cast_down, "float32",
               "aten.mul.Tensor computed in")]


def _checked(decl, check, device, fake, dtype):
    with on_device(Target(device, fake)):
        CHECKS[check](_case(decl, check, device, fake, dtype))


@pytest.mark.parametrize("device,fake", [("cpu", False), ("cuda", True)])
@pytest.mark.parametrize("decl", SHAPES, ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_each_island_shape_passes_when_right(decl, device, fake, dtype):
    before = AutocastState.capture(device)
    for check in CHECKS:
        if fake and check in ("grad", "numerics"):
            continue
        _checked(decl, check, device, fake, dtype)
    assert before.diff(AutocastState.capture(device)) == []


@pytest.mark.parametrize("device,fake", [("cpu", False), ("cuda", True)])
@pytest.mark.parametrize("slot,bug,check,text", SHAPE_BUGS, ids=[b[1].__name__ for b in SHAPE_BUGS])
def test_each_island_shape_fails_when_a_planted_bug_breaks_it(slot, bug, check, text, device,
                                                              fake):
    decl = next(d for d in SHAPES if d.name == f"planted.{slot}")
    undo = planted_islands.plant(**{slot: bug})
    try:
        with pytest.raises(ConformanceFailure, match=re.escape(text)):
            _checked(decl, check, device, fake, torch.float16)
    finally:
        undo()


def test_an_argument_the_library_makes_in_float32_is_declared_not_sent_lowered():
    """Without ``arguments`` the float32 scale is sent in the region's dtype, as no caller
    of the library sends it: a false red; declared, the island passes."""
    decl = next(d for d in SHAPES if d.name == "planted.island_arguments")
    with pytest.raises(ConformanceFailure, match="aten.mul.Tensor computed in bfloat16"):
        island.check_float32(_case(dataclasses.replace(decl, arguments=()), "float32"))
    built_by_hand = dataclasses.replace(decl, arguments=(None, lambda x, dtype: x.float()))
    for check in CHECKS:
        CHECKS[check](_case(built_by_hand, check))


_WEIGHT = torch.ones(8, requires_grad=True)


def _held(device):
    scale = _WEIGHT * 2  # autograd history, made outside torch.no_grad()
    return lambda x: x.float() * scale


@pytest.mark.parametrize("field,how", [
    ("build", dict(build=_held)),
    ("inputs", dict(build=lambda d: lambda x: x.float(),
                    inputs=lambda d: ((_WEIGHT * 2).expand(4, 8),)))])
def test_autograd_history_in_a_declaration_is_a_declaration_error(field, how):
    decl = Float32Island("test.history", devices=("cpu",), **how)
    with pytest.raises(DeclarationError, match="autograd history") as info:
        island.check_grad(_case(decl, "grad"))
    assert info.value.field == field and "torch.no_grad()" in str(info.value)


@pytest.mark.parametrize("field,value", [("before", "output"), ("before", "float32"),
                                         ("arguments", (3,)), ("arguments", [None]),
                                         ("ending", "output"), ("returns", "island")])
def test_a_bad_shape_field_is_one_error_naming_it(field, value):
    with pytest.raises(DeclarationError) as info:
        validate(dataclasses.replace(MODULE, **{field: value}))
    assert info.value.field == field


# -- a devices failure's reproduction (checks/wrappers/devices_repro.py) ------------------

def _casts_by_cudas_flag(fn):
    """A forward decorator that casts when CUDA's flag is on (``is_autocast_enabled()``)."""
    def run(x, *args, **kwargs):
        return fn(x.to(torch.bfloat16) if torch.is_autocast_enabled() else x, *args, **kwargs)
    return run


def _cuda_always(precision, device):
    return torch.autocast("cuda", dtype=planted.PRECISIONS[precision])


DEVICES_BROKEN = [
    dataclasses.replace(planted.REFERENCE[0], name="region_reads", make=planted.nests_by_cuda_flag),
    dataclasses.replace(planted.REFERENCE[0], name="region_changes", make=_cuda_always),
    dataclasses.replace(planted.REFERENCE[1], name="forward_reads", decorate=_casts_by_cudas_flag),
    dataclasses.replace(SOUND, name="island_reads", context=planted.island_of("reads_other")),
    dataclasses.replace(planted.PLANTED[3], name="island_changes",
                        build=lambda d: planted.leaves_through_other),
    dataclasses.replace(RUNNER, name="runner_changes", runs=planted.run_in_cuda_region),
    dataclasses.replace(planted_shapes.REFERENCE[0], name="swap_reads",
                        make=planted_shapes.swap_of("reads_other")),
    dataclasses.replace(planted_shapes.REFERENCE[1], name="predicate_reads",
                        answers=planted_shapes.reads_other),
]


@pytest.mark.parametrize("decl", DEVICES_BROKEN, ids=lambda d: d.name)
def test_a_devices_failure_reproduces_the_scenario_its_text_names(decl):
    """Run as pasted (``decl`` bound), the reproduction prints, at the point the failure
    names, what the failure says was seen there."""
    case = next(c for c in cases([decl], "cpu", (torch.float16,)) if c.check == "devices")
    before = AutocastState.capture("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.autocast("cuda") without CUDA warns
        with pytest.raises(ConformanceFailure) as info:
            check_devices(case)
    text = str(info.value)
    lines = text.split("\n")
    # "<point>: <what was seen> instead of/, where it was set to ...", or "it went another
    # way: <point> instead of <the point the run without the other device's state reached>"
    seen = lines[2].strip().removeprefix("it went another way: ")
    point, observed = re.split(r": | instead of ", seen, maxsplit=1)
    observed = re.split(r" instead of |, where it was set to ", observed)[0] if ": " in seen \
        else ""
    code = [line[4:] for line in lines[lines.index("  reproduce:") + 1:]]
    assert code[1].startswith("decl = ...")
    cuda = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    out = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out):
            warnings.simplefilter("ignore")
            exec("\n".join(code[:1] + code[2:]), {"decl": decl})  # noqa: S102 - the repro
    finally:
        torch.set_autocast_enabled("cuda", cuda[0])
        torch.set_autocast_dtype("cuda", cuda[1])
        before.restore()
    printed = [line for line in out.getvalue().splitlines() if line.startswith(f"{point}: ")]
    assert printed and observed in printed[0], (text, out.getvalue())


def test_a_runners_restored_failure_reproduces_what_it_names():
    """Run as pasted, the reproduction prints the differences the failure lists."""
    decl = dataclasses.replace(RUNNER, name="open_on_raise", runs=planted_islands.leaves_open_on_raise)
    case = next(c for c in cases([decl], "cpu", (torch.bfloat16,)) if c.check == "restored")
    before = AutocastState.capture("cpu")
    with pytest.raises(ConformanceFailure) as info:
        runner.check_restored(case)
    lines = str(info.value).split("\n")
    named = [line.strip().removeprefix("after the body raised: ") for line in lines
             if line.strip().startswith("after the body raised: ")]
    code = [line[4:] for line in lines[lines.index("  reproduce:") + 1:]]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec("\n".join(code[:1] + code[2:]), {"decl": decl})  # noqa: S102 - the repro
    finally:
        before.restore()
    assert named and all(n in out.getvalue() for n in named), (named, out.getvalue())


def test_a_failure_names_each_input_as_it_was_sent():
    """An argument declared float32 is sent in float32: a message does not say the inputs
    were in bfloat16."""
    from amp_conformance.checks.wrappers.island_inputs import as_sent

    x, w, n = torch.ones(2, dtype=torch.bfloat16), torch.ones(2), torch.ones(2, dtype=torch.int64)
    assert as_sent((None, None), (x, n), torch.bfloat16) == "inputs in bfloat16"
    assert as_sent((None, torch.float32, None), (x, w, n), torch.bfloat16) == (
        "input 0 bfloat16, input 1 float32 (declared float32), input 2 int64")


_RMS = '''
    import torch
    from amp_conformance.checks.wrappers import Float32Island

    class RMSNorm(torch.nn.Module):
        """Leaves autocast and computes in what it is given (no upcast){doc}."""
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))

        @torch.autocast("cpu", enabled=False)
        def forward(self, x):
            {body}
            return x * torch.rsqrt(ms + 1e-6) * self.weight.to(x.dtype)

    WRAPPERS = [Float32Island(name="rmsnorm", devices=("cpu",), returns="input",
                              build=lambda d: RMSNorm().to(d){core})]
'''
_IN_DTYPE = "ms = x.pow(2).mean(-1, keepdim=True)"
_UPCAST = "ms = x.float().pow(2).mean(-1, keepdim=True).to(x.dtype)"


@pytest.mark.parametrize("body, core, failed, says", [
    (_IN_DTYPE, ', core="input"', 0, None),
    (_IN_DTYPE, "", 4, "runs its computation in float32 inside any autocast region"),
    (_UPCAST, ', core="input"', 4, "aten.pow.Tensor_Scalar computed in float32, not bfloat16"),
], ids=["declared-input", "claimed-float32", "upcasts-a-part"])
def test_an_island_that_computes_in_its_inputs_dtype_is_a_shape(pytester, body, core, failed,
                                                                 says):
    """A norm under autocast(enabled=False) that never upcasts is declared core="input":
    every check passes; claimed float32 its float32 and nesting items fail in both amp
    dtypes; declared input, a part that upcasts is caught there."""
    pytester.makepyfile(decl=_RMS.replace("{doc}", "").replace("{body}", body)
                        .replace("{core}", core))
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_wrappers", "--wrapper",
                                "decl:WRAPPERS", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == failed, result.stdout.str()
    assert outcomes.get("passed", 0) >= 2
    if says:
        assert says in result.stdout.str()


def test_a_fake_device_skip_names_a_library_whose_folder_starts_like_torchs(tmp_path):
    """The library's frame is found by whole path components: a package named torchmetrics
    (or torchvision, torchaudio) is the library's, not torch's."""
    import os

    from amp_conformance.checks.wrappers import fake_calls

    site = os.path.dirname(os.path.dirname(torch.__file__))
    assert fake_calls._library(os.path.join(site, "torchmetrics", "image", "arniqa.py"))
    assert not fake_calls._library(os.path.join(site, "torch", "nn", "modules", "module.py"))
    assert not fake_calls._library(fake_calls.__file__)
    assert not fake_calls._library(contextlib.__file__)
    assert fake_calls._library(str(tmp_path / "mylib" / "kernels.py"))


def _forgets_to_leave(x):
    return (x @ x.mT).float()  # the product in the caller's region


def test_a_nesting_failure_reproduces_the_nesting_its_first_line_names():
    decl = Float32Island("test.forgets", devices=("cpu",), build=lambda d: _forgets_to_leave)
    with pytest.raises(ConformanceFailure) as info:
        island.check_nesting(_case(decl, "nesting"))
    text = str(info.value)
    assert "inside float16 > bfloat16 (inputs in bfloat16): aten.mm.default computed in " \
           "bfloat16" in text
    assert ("    with torch.autocast('cpu', dtype=torch.float16):\n"
            "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
            "            out = island(*[t.to(torch.bfloat16)") in text


def _polar(x, freqs, bias):
    """Polar positions as a library writes them: the float32 angles made from arguments the
    library always makes in float32 first, then work in the input's dtype before the
    float32 core, the core's result in float32."""
    with torch.autocast(x.device.type, enabled=False):
        angles = freqs + bias  # float32 arguments alone: prepares the core
        magnitude = torch.nn.functional.softplus(x)  # the input's dtype, before the core
        return magnitude.float() * torch.cos(angles)


POLAR = Float32Island("test.polar", devices=("cpu",), build=lambda d: _polar,
                      inputs=lambda d: (tensor(4, 8, device=d), tensor(8, device=d),
                                        tensor(8, device=d)),
                      arguments=(None, torch.float32, torch.float32), before="input")


@pytest.mark.parametrize("check", ["float32", "nesting"])
def test_work_on_arguments_made_in_float32_does_not_start_the_core(check):
    """The float32 core starts at the first float32 op on what the region sent: an op on
    arguments the library always makes in float32 prepares it (before: the softplus after
    it was held to float32, 'in its float32 core')."""
    CHECKS[check](_case(POLAR, check))


def _cut_in_a_region(x):
    """A fast path for the region's lower-precision activations that forgets autograd."""
    with torch.autocast(x.device.type, enabled=False):
        y = x.float().exp()
        return y.detach() if x.dtype != torch.float32 else y


def test_an_island_that_cuts_its_graph_in_a_region_alone_fails_grad():
    """No gradient inside a region where the float32 computation has one is the island's
    failure, not 'no gradient to check'."""
    decl = Float32Island("test.cuts", devices=("cpu",), build=lambda d: _cut_in_a_region)
    with pytest.raises(ConformanceFailure, match="inside a region no output depends on a "
                       "floating input or a parameter; in the float32 computation they do"):
        island.check_grad(_case(decl, "grad"))
