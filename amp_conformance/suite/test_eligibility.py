"""Autocast casts only eligible tensors: floating, not float64, on the autocast device."""

import pytest
import torch

from amp_conformance.probes import ineligible_device
from amp_conformance.state import unchanged_autocast_state

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
    other = ineligible_device(amp_target.device)
    mm, cat = _mm_inside(amp_target, amp_dtype, device=other, dtype=torch.float32)
    assert (mm, cat) == (torch.float32, torch.float32), (
        f"float32 tensors on {other} were cast under {amp_target.device} autocast: mm gave {mm}"
    )
