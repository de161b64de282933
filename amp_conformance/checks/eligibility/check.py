"""Autocast casts only eligible tensors: floating, not float64, on the autocast device.

Each check raises :class:`ConformanceFailure` saying what was cast, or
:class:`NotApplicable` where the device gives it nothing to check."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.probes import CastCounter
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema.argspec import other_device


def _mm_inside(target: Target, amp_dtype: torch.dtype, **tensor_kwargs: Any
               ) -> tuple[torch.dtype, torch.dtype]:
    with unchanged_autocast_state(target.device, "the check"), target.tensors():
        a = torch.ones(4, 4, **tensor_kwargs)
        with target.autocast(amp_dtype):
            return torch.mm(a, a).dtype, torch.cat([a, a]).dtype


def check_float64_not_cast(target: Target, amp_dtype: torch.dtype) -> None:
    mm, cat = _mm_inside(target, amp_dtype, device=target.device, dtype=torch.float64)
    if (mm, cat) != (torch.float64, torch.float64):
        raise ConformanceFailure(f"float64 inputs were cast: mm gave {mm}, cat {cat}")


def check_float32_cast(target: Target, amp_dtype: torch.dtype) -> None:
    """The counterpart: the same call on float32 inputs is cast, so the probes can fail."""
    mm, _ = _mm_inside(target, amp_dtype, device=target.device, dtype=torch.float32)
    if mm != amp_dtype:
        raise ConformanceFailure(f"torch.mm on float32 inputs gave {mm} under {amp_dtype} "
                                 "autocast")


def check_integer_not_cast(target: Target, amp_dtype: torch.dtype) -> None:
    with target.tensors():
        a = torch.ones(4, 4, device=target.device, dtype=torch.int64)
        try:
            torch.mm(a, a)
        except (RuntimeError, NotImplementedError):
            supports_int_mm = False
        else:
            supports_int_mm = True
    with unchanged_autocast_state(target.device, "the check"), target.tensors():
        a = torch.ones(4, 4, device=target.device, dtype=torch.int64)
        with target.autocast(amp_dtype):
            cat = torch.cat([a, a]).dtype
            mm = torch.mm(a, a).dtype if supports_int_mm else None
    if cat != torch.int64:
        raise ConformanceFailure(f"integer inputs of torch.cat were cast to {cat}")
    if mm is None:
        raise NotApplicable(f"torch.mm has no int64 kernel on {target.device}; torch.cat "
                            "checked only")
    if mm != torch.int64:
        raise ConformanceFailure(f"integer inputs of torch.mm were cast to {mm}")


def _probes(dev: str, amp_dtype: torch.dtype
            ) -> dict[str, tuple[Callable[[torch.Tensor], Any], torch.Tensor, torch.dtype]]:
    """Calls that put a 0-dim tensor of another device in the device's Autocast kernel,
    each with an eligible tensor the kernel must cast (proof that the kernel ran), and the
    dtype the foreign tensor takes so that the policy would change it were it eligible."""
    m = torch.ones(4, 4, device=dev)
    v = torch.ones(4, device=dev)
    h = torch.ones(4, device=dev, dtype=amp_dtype)
    return {
        # lower precision: m is cast to the autocast dtype, a float32 scalar would be too
        "torch.addmm": (lambda s: torch.addmm(s, m, m), m, torch.float32),
        # promote: h is widened to float32, an autocast-dtype scalar would be too
        "torch.addcmul": (lambda s: torch.addcmul(v, h, s), h, amp_dtype),
    }


def check_other_device_not_cast(target: Target, amp_dtype: torch.dtype) -> None:
    """A tensor of another device in the same call is never cast.

    A call that mixes devices and has a tensor of the device under test enters that
    device's Autocast kernel whatever the others are (a cpu scalar beside cuda tensors;
    on cpu, a meta tensor beside cpu tensors, where the call then fails on the device
    mix). The kernel casts its inputs before the op runs, so counting the conversions
    (``aten._to_copy``) of the foreign tensor decides it, whether or not the op then
    accepts the mix; the cast of the eligible tensor beside it proves the kernel ran.
    """
    dev = target.device
    other = other_device(dev)
    checked, unreached = [], []
    with unchanged_autocast_state(dev, "the check"), target.tensors():
        for name, (call, eligible, scalar_dtype) in _probes(dev, amp_dtype).items():
            scalar = torch.tensor(2.0, dtype=scalar_dtype, device=other)
            with target.autocast(amp_dtype), CastCounter(scalar) as counter, \
                    CastCounter(eligible) as proof:
                # An op that refuses the mix once the kernel has cast (cpu beside meta,
                # or a float32 scalar beside lower-precision matrices) is not at fault.
                with contextlib.suppress(RuntimeError, NotImplementedError):
                    call(scalar)
            if not proof.count:
                unreached.append(name)
                continue
            checked.append(name)
            if counter.count != 0:
                raise ConformanceFailure(
                    f"{name}: a {other} tensor in the call was cast to {counter.casts} under "
                    f"{dev} autocast; only tensors of the autocast device are eligible")
    if not checked:
        raise NotApplicable(f"no probe entered the {dev} Autocast kernel with a {other} "
                            f"tensor: {', '.join(unreached)} cast nothing here")
