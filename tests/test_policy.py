"""The policy family (checks/policy) catches broken autocast kernels: the per-entry check
(``check.py``, kernel entry included) and the property of the lower, fp32 and promote
policies (``property.py``).

Broken kernels are emulated by overriding an ``Autocast<Device>`` kernel from Python
(``torch.library``), or by dropping it for a fallthrough; every override is destroyed
again, also when the test fails, which restores PyTorch's own kernel. Kernel entry is part
of the policy verdict: a backend without an autocast kernel for a promote op fails,
although builtin promotion gives the dtypes autocast would. The property tests run one op
under the ``ci`` profile of one part, as the suite's per-op items do, and check that the
autocast state is what it was.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from amp_conformance.checks import profiles
from amp_conformance.checks.numerics.check import check_numerics
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.checks.registry import mutants
from amp_conformance.core.casting import is_eligible
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from tests.mutants import CPU, below, below_autocast, case_of, overridden, property_fails

#: the tests of a property plant bugs in autocast itself: the state must come back
STATE_RESTORED = pytest.mark.usefixtures("state_restored")


# -- the per-entry check ---------------------------------------------------------------


def test_policy_failure_message_names_op_entry_device_and_dtypes():
    case = case_of("cpu", "mm", torch.bfloat16)
    undo = mutants()["mm-kept-fp32"].apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    finally:
        undo()
    message = str(info.value)
    for words in ("torch.mm", "entry mm", "on cpu", "torch.bfloat16",
                  "output dtype torch.float32, expected torch.bfloat16", "reproduce:"):
        assert words in message, message
    check_policy(case)  # restored


def max_pool3d_lower(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    dtype = torch.get_autocast_dtype("cpu")
    with below("AutocastCPU"):
        return torch.ops.aten.max_pool3d(x.to(dtype), kernel_size, stride, padding, dilation, ceil_mode)


def test_cpu_max_pool3d_run_in_lower_precision_is_caught():
    """A broken AutocastCPU kernel for an op PyTorch's own lists never touch."""
    case = case_of("cpu", "max_pool3d", torch.bfloat16)
    check_policy(case)
    check_numerics(case)
    with overridden("max_pool3d", "AutocastCPU", max_pool3d_lower):
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    message = str(info.value)
    assert "torch.max_pool3d inside autocast: output dtype torch.bfloat16, expected torch.float32" \
        in message, message
    check_policy(case)


@pytest.fixture
def no_kernel():
    """Replace an op's Autocast kernel by a fallthrough: the device has no autocast for it."""
    with contextlib.ExitStack() as dropped:
        yield lambda op, key: dropped.enter_context(
            overridden(op, key, torch.library.fallthrough_kernel))


@pytest.mark.parametrize("entry_id", ["cat", "stack"])
def test_promote_op_without_an_autocast_kernel_fails_naming_op_and_key(no_kernel, entry_id):
    case = case_of("cpu", entry_id, torch.bfloat16)
    check_policy(case)  # torch's own AutocastCPU kernel: conforms
    no_kernel(entry_id, "AutocastCPU")
    with pytest.raises(ConformanceFailure) as info:
        check_policy(case)
    message = str(info.value)
    assert f"torch.{entry_id} entered no AutocastCPU kernel" in message, message
    assert "builtin type promotion can mimic promote" in message


def test_fake_device_without_the_kernel_fails_too(no_kernel):
    case = case_of("cuda", "addcmul", torch.float16, fake=True)
    check_policy(case)
    no_kernel("addcmul", "AutocastCUDA")
    with pytest.raises(ConformanceFailure, match="entered no AutocastCUDA kernel"):
        check_policy(case)


# -- the property of the lower, fp32 and promote policies --------------------------------


def _floating_to(dtype):
    return lambda t: t.to(dtype) if t.is_floating_point() else t


@STATE_RESTORED
def test_lower_property_catches_cast_of_float64(ci_part):
    """A kernel that casts every floating input, float64 included."""

    def mm(a, b):
        cast = _floating_to(torch.get_autocast_dtype("cpu"))
        return below_autocast(torch.mm, cast(a), cast(b))

    with overridden("mm", "AutocastCPU", mm):
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "torch.mm", "reproduce:")


@STATE_RESTORED
def test_lower_values_property_catches_right_dtype_wrong_values(ci_part):
    """A kernel that computes in float32 and casts the result: the dtype is right, only
    the values test (bitwise against the hand-cast control) sees it."""

    def mm(a, b):
        def up(t):
            return t.float() if is_eligible(t, "cpu") else t

        out = below_autocast(torch.mm, up(a), up(b))
        return out.to(torch.get_autocast_dtype("cpu")) if out.dtype == torch.float32 else out

    with overridden("mm", "AutocastCPU", mm):
        policy_properties.check_policy_property(  # dtypes agree: passes
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"])
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=True, ops=["mm"]),
            policy_properties.POLICIES["lower"], "values differ from the hand-cast control")


@STATE_RESTORED
def test_fp32_property_catches_missing_cast(ci_part):
    """An fp32-policy kernel that forgets to cast lower-precision inputs to float32."""
    with overridden("mse_loss", "AutocastCPU", lambda a, b, reduction=1: below_autocast(
            torch._C._nn.mse_loss, a, b, reduction)):
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "fp32", ci_part, values=False, ops=["mse_loss"]),
            policy_properties.POLICIES["fp32"])


@STATE_RESTORED
def test_promote_property_catches_cast_to_autocast_dtype(ci_part):
    """A promote kernel that casts to the autocast dtype instead of the widest type."""

    def cat(tensors, dim=0):
        cast = _floating_to(torch.get_autocast_dtype("cpu"))
        return below_autocast(torch.cat, [cast(t) if t.dtype != torch.float64 else t
                                          for t in tensors], dim)

    with overridden("cat", "AutocastCPU", cat):
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "promote", ci_part, values=False, ops=["cat"]),
            policy_properties.POLICIES["promote"])


def _device_blind_mm(device: str, key: str):
    """A lower-precision mm kernel that casts floating tensors of any device: a tensor of
    another device in the call is cast as if it were eligible."""

    def mm(a, b):
        def cast(t):
            blind = t.is_floating_point() and t.dtype != torch.float64
            return t.to(torch.get_autocast_dtype(device)) if blind else t

        return below_autocast(torch.mm, cast(a), cast(b), key=key)

    return mm


@STATE_RESTORED
def test_lower_property_catches_kernel_blind_to_device(ci_part):
    """Only the calls that mix devices reach this bug (meta beside cpu): the other
    device's tensor is counted as cast, although the call then fails on both sides."""
    with overridden("mm", "AutocastCPU", _device_blind_mm("cpu", "AutocastCPU")):
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "autocast cast an ineligible input",
            "tensor on meta")


@STATE_RESTORED
def test_lower_property_catches_kernel_blind_to_device_on_fake_cuda(ci_part):
    """The same bug in the AutocastCUDA kernel, run through --fake: a cpu tensor is cast."""
    with overridden("mm", "AutocastCUDA", _device_blind_mm("cuda", "AutocastCUDA")):
        property_fails(lambda: policy_properties.check_policy_property(
            Target("cuda", fake=True), torch.float16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "autocast cast an ineligible input",
            "tensor on cpu")


@STATE_RESTORED
def test_promote_property_catches_cast_of_integers(ci_part):
    """A promote kernel that also casts integer tensors to the widest type: cat promotes
    them to the same dtype anyway, so outputs and values agree; only the count of casts
    of the ineligible input sees it."""

    def cat(tensors, dim=0):
        widest = None
        for t in tensors:
            if is_eligible(t, "cpu"):
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
        if widest is None:
            return below_autocast(torch.cat, tensors, dim)
        cast = [t.to(widest) if is_eligible(t, "cpu") or not t.is_floating_point() else t
                for t in tensors]
        return below_autocast(torch.cat, cast, dim)

    with overridden("cat", "AutocastCPU", cat):
        property_fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "promote", ci_part, values=True, ops=["cat"]),
            policy_properties.POLICIES["promote"], "autocast cast an ineligible input")


@STATE_RESTORED
def test_policy_property_rejects_values_on_fake_target():
    with pytest.raises(ValueError, match="carries no values"):
        policy_properties.check_policy_property(
            Target("cuda", fake=True), torch.float16, "lower", profiles.selected(),
            values=True)
