"""Autocast casts only eligible tensors: floating, not float64, on the autocast device."""

import contextlib

import pytest
import torch

from amp_conformance.core.probes import CastCounter
from amp_conformance.core.state import unchanged_autocast_state

pytestmark = pytest.mark.amp_check("eligibility")


def _mm_inside(target, amp_dtype, **tensor_kwargs):
    with unchanged_autocast_state(target.device, "the check"), target.tensors():
        a = torch.ones(4, 4, **tensor_kwargs)
        with target.autocast(amp_dtype):
            return torch.mm(a, a).dtype, torch.cat([a, a]).dtype


def test_float64_is_not_cast(amp_target, amp_dtype):
    mm, cat = _mm_inside(amp_target, amp_dtype, device=amp_target.device, dtype=torch.float64)
    assert (mm, cat) == (torch.float64, torch.float64), f"float64 inputs were cast: mm gave {mm}, cat {cat}"


def test_float32_is_cast(amp_target, amp_dtype):
    """The counterpart: the same call on float32 inputs is cast, so the probes above can fail."""
    mm, _ = _mm_inside(amp_target, amp_dtype, device=amp_target.device, dtype=torch.float32)
    assert mm == amp_dtype, f"torch.mm on float32 inputs gave {mm} under {amp_dtype} autocast"


def test_integer_is_not_cast(amp_target, amp_dtype):
    with amp_target.tensors():
        a = torch.ones(4, 4, device=amp_target.device, dtype=torch.int64)
        try:
            torch.mm(a, a)
        except (RuntimeError, NotImplementedError):
            supports_int_mm = False
        else:
            supports_int_mm = True
    with unchanged_autocast_state(amp_target.device, "the check"), amp_target.tensors():
        a = torch.ones(4, 4, device=amp_target.device, dtype=torch.int64)
        with amp_target.autocast(amp_dtype):
            cat = torch.cat([a, a]).dtype
            mm = torch.mm(a, a).dtype if supports_int_mm else None
    assert cat == torch.int64, f"integer inputs of torch.cat were cast to {cat}"
    if mm is None:
        pytest.skip(f"torch.mm has no int64 kernel on {amp_target.device}; torch.cat checked only")
    assert mm == torch.int64, f"integer inputs of torch.mm were cast to {mm}"


def test_other_device_is_not_cast(amp_target, amp_dtype):
    """A tensor of another device in the same call (a cpu scalar) is never cast.

    Only a call that mixes devices reaches the device's autocast kernel with a foreign
    tensor, so the probes pass a 0-dim cpu tensor, which ops accept beside device tensors,
    in a dtype the policy would change if it counted as eligible.
    """
    dev = amp_target.device
    if dev == "cpu":
        pytest.skip("not applicable on cpu: no other device type here whose tensors can share a "
                    "call with cpu tensors (meta tensors never enter the AutocastCPU kernels)")
    checked = []
    with unchanged_autocast_state(dev, "the check"), amp_target.tensors():
        m = torch.ones(4, 4, device=dev)
        v = torch.ones(4, device=dev)
        h = torch.ones(4, device=dev, dtype=amp_dtype)
        probes = {
            # lower precision: a float32 cpu scalar would be cast to the autocast dtype
            "torch.addmm": (lambda s: torch.addmm(s, m, m), torch.float32),
            # promote: an autocast-dtype cpu scalar would be widened to float32
            "torch.addcmul": (lambda s: torch.addcmul(v, h, s), amp_dtype),
        }
        for name, (call, scalar_dtype) in probes.items():
            scalar = torch.tensor(2.0, dtype=scalar_dtype)
            try:
                call(scalar)
            except (RuntimeError, NotImplementedError):
                continue  # the op refuses a cpu scalar here even without autocast
            with amp_target.autocast(amp_dtype), CastCounter(scalar) as counter:
                # Autocast casts before the op runs; an op that then refuses the mixed
                # dtypes (a float32 scalar beside lower-precision matrices) is not at fault.
                with contextlib.suppress(RuntimeError, NotImplementedError):
                    call(scalar)
            checked.append(name)
            assert counter.count == 0, (
                f"{name}: a cpu tensor in the call was cast to {counter.casts} under {dev} "
                "autocast; only tensors of the autocast device are eligible"
            )
    if not checked:
        pytest.skip(f"no probe op accepts a cpu scalar beside {dev} tensors here")
