"""The two kernels behind GradScaler, checked directly against plain tensor ops and a
pure-Python model: ``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``.

A backend that autocasts to float16 must implement both for its device; GradScaler calls
nothing else device-specific. With fake tensors (``--fake``) only what the Meta kernels
can show is checked: the kernels work in place and keep every shape, stride and dtype.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks.gradscaler.cases import VIEWS, Grad, UnscaleCase, UpdateCase
from amp_conformance.core.compare import close, tolerance_kwargs
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.target import Target
from amp_conformance.schema.versions import release

UNSCALE = "torch._amp_foreach_non_finite_check_and_unscale_"
UPDATE = "torch._amp_update_scale_"


# -- building the gradients of an unscale call -------------------------------------------


def build_grads(case: UnscaleCase, device: str, fake: bool = False
                ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The call's base tensors and the views the kernel is given. Real runs: seeded random
    values (times 64, so that low-precision rounding shows) with the planted non-finite
    values; fake runs: empty tensors of the same layout, made on the device."""
    bases, views = [], []
    for i, grad in enumerate(case.grads):
        dtype = getattr(torch, grad.dtype)
        if fake:
            base = torch.empty(grad.shape, dtype=dtype, device=device)
        else:
            gen = torch.Generator().manual_seed(1000 + i)
            base = (torch.randn(grad.shape, generator=gen) * 64).to(dtype)
            for index, value in grad.plant:
                base[index] = value
            base = base.to(device)
        bases.append(base)
        views.append(VIEWS[grad.view][1](base))
    return bases, views


def _scalars(case: UnscaleCase, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    found_inf = torch.full((), case.found_inf_before, dtype=torch.float32, device=device)
    inv_scale = torch.full((), case.inv_scale, dtype=torch.float32, device=device)
    return found_inf, inv_scale


def _describe(case: UnscaleCase, device: str) -> str:
    grads = "; ".join(f"{i}: {g.describe()}" for i, g in enumerate(case.grads))
    inv = torch.tensor(case.inv_scale, dtype=torch.float32).item()
    return (f"{UNSCALE} on {device}, case {case.id!r} ({case.why}); gradients {grads}; "
            f"inv_scale={inv!r}, found_inf before the call {case.found_inf_before}")


def _nonfinite_reason(case: UnscaleCase, views: list[torch.Tensor]) -> str | None:
    """Why found_inf must be set (the first non-finite value the call holds), or None."""
    for i, (grad, view) in enumerate(zip(case.grads, views, strict=True)):
        data = view.detach().cpu().float()
        for name, hit in (("nan", data.isnan()), ("inf", data == math.inf),
                          ("-inf", data == -math.inf)):
            if bool(hit.any()):
                return f"the call holds a {name} value (gradient {i}: {grad.describe()})"
    return None


def reference(view: torch.Tensor, inv_scale: float) -> torch.Tensor:
    """The unscaled gradient from plain tensor ops on cpu: the float32 product with
    inv_scale, rounded once to the gradient's dtype."""
    inv = torch.tensor(inv_scale, dtype=torch.float32)
    return (view.detach().cpu().float() * inv).to(view.dtype)


def _mismatch(actual: torch.Tensor, expected: torch.Tensor, numerics: str) -> str | None:
    return close(actual, expected, equal_nan=True, **tolerance_kwargs(numerics))


# -- the unscale kernel -------------------------------------------------------------------

#: PyTorch's CUDA unscale kernels have no bfloat16 implementation (oplists/defects.toml)
CUDA_NO_BF16 = "cuda-unscale-no-bfloat16"
#: how a device without a kernel for a gradient's dtype shows it (the check's message)
NO_KERNEL = "has no implementation for"


def known_defect(target: Target, case: UnscaleCase) -> str | None:
    """The reference defect ``case`` meets on ``target``, or None: bfloat16 gradients on a
    real CUDA device (the fake tier runs the Meta kernel, which has every dtype)."""
    if target.device == "cuda" and not target.fake and any(
            g.dtype == "bfloat16" for g in case.grads):
        return CUDA_NO_BF16
    return None


def _unscale(where: str, views: list[torch.Tensor], found_inf: torch.Tensor,
             inv_scale: torch.Tensor) -> Any:
    """The in-place kernel; a dtype without a kernel is a failure naming the dtypes."""
    try:
        return torch._amp_foreach_non_finite_check_and_unscale_(views, found_inf, inv_scale)
    except NotImplementedError as exc:
        dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in views})
        raise ConformanceFailure(f"{where}: the unscale kernel {NO_KERNEL} gradients of dtypes "
                                 f"{', '.join(dtypes)}: {first_line(exc)}") from None


def check_unscale(target: Target, case: UnscaleCase, numerics: str) -> None:
    """Run one unscale call and compare found_inf, the unscaled views and the untouched
    rest of their base tensors with the reference."""
    device = target.device
    bases, views = build_grads(case, device)
    before = [b.detach().cpu().clone() for b in bases]
    expected = [reference(v, case.inv_scale) for v in views]
    found_inf, inv_scale = _scalars(case, device)
    why = _nonfinite_reason(case, views)
    where = _describe(case, device)
    _unscale(where, views, found_inf, inv_scale)
    want = 1.0 if why else case.found_inf_before
    got = found_inf.item()
    if got != want:
        if why is None and case.found_inf_before:
            why = (f"found_inf was {case.found_inf_before} before the call: it accumulates "
                   "across calls and the kernel must never clear it")
        raise ConformanceFailure(f"{where}: found_inf is {got}, expected {want}: "
                                 f"{why or 'every gradient is finite'}")
    for i, (grad, base, old) in enumerate(zip(case.grads, bases, before, strict=True)):
        _check_outside_view(where, i, grad, base, old)
    if why is not None:
        return  # gradients of a skipped step are discarded: their values are not checked
    for i, (grad, view, ref) in enumerate(zip(case.grads, views, expected, strict=True)):
        if view.dtype != ref.dtype or view.shape != ref.shape:
            raise ConformanceFailure(f"{where}: gradient {i} ({grad.describe()}) came back as "
                                     f"{view.dtype}{list(view.shape)}")
        problem = _mismatch(view.detach().cpu(), ref, numerics)
        if problem:
            mode = "bitwise" if numerics == "bitwise" else "within tolerance"
            raise ConformanceFailure(
                f"{where}: gradient {i} ({grad.describe()}) is not the reference (the float32 "
                f"product with inv_scale, rounded to {grad.dtype}) {mode}:\n{problem}")


def _check_outside_view(where: str, i: int, grad: Grad, base: torch.Tensor,
                        old: torch.Tensor) -> None:
    """Elements of the base tensor that the view does not cover must be left alone."""
    if grad.view == "dense":
        return
    covered = torch.zeros(old.shape, dtype=torch.bool)
    VIEWS[grad.view][1](covered).fill_(True)
    now = base.detach().cpu()
    if not torch.equal(now[~covered].nan_to_num(), old[~covered].nan_to_num()):
        raise ConformanceFailure(f"{where}: gradient {i} ({grad.describe()}): elements of its "
                                 "base tensor outside the view were changed")


def _layout(t: torch.Tensor) -> tuple:
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.device.type)


#: FakeTensorMode runs the functional ``_amp_foreach_non_finite_check_and_unscale`` from
#: this release on; before (2.6.0, 2.7.1) its ``foreach_run_and_map_input_device`` fails on
#: the (list, tensor) result ("'list' object has no attribute 'device'"): on fake tensors of
#: those releases only the in-place kernel is checked
FAKE_FUNCTIONAL_UNSCALE_SINCE = "2.8"


def check_unscale_meta(target: Target, case: UnscaleCase) -> None:
    """What fake tensors can show: the call works in place (returns None, keeps every
    gradient's dtype, shape, strides and offset, and found_inf's), and the functional
    variant returns tensors of the gradients' dtypes and shapes."""
    device = target.device
    where = _describe(case, device)
    with target.tensors():
        _, views = build_grads(case, device, fake=target.fake)
        found_inf, inv_scale = _scalars(case, device)
        before = [_layout(v) for v in views] + [_layout(found_inf)]
        out = _unscale(where, views, found_inf, inv_scale)
        after = [_layout(v) for v in views] + [_layout(found_inf)]
        functional = getattr(torch.ops.aten, "_amp_foreach_non_finite_check_and_unscale", None)
        if target.fake and release() < FAKE_FUNCTIONAL_UNSCALE_SINCE:
            functional = None  # FakeTensorMode of this torch cannot run it (see the constant)
        result = functional.default(views, found_inf, inv_scale) if functional else None
    if out is not None:
        raise ConformanceFailure(f"{where}: the in-place kernel returned {type(out).__name__}, "
                                 "expected None")
    if before != after:
        raise ConformanceFailure(f"{where}: the in-place kernel changed a layout (dtype, shape, "
                                 f"strides, offset, device): before {before}, after {after}")
    if result is not None:
        grads_out, found_out = result
        got = [(t.dtype, tuple(t.shape)) for t in [*grads_out, found_out]]
        want = [(t.dtype, tuple(t.shape)) for t in [*views, found_inf]]
        if got != want:
            raise ConformanceFailure(f"{where}: the functional variant "
                                     f"_amp_foreach_non_finite_check_and_unscale returned "
                                     f"{got}, expected {want}")


# -- the update kernel and its model ------------------------------------------------------


def f32(value: float) -> float:
    """``value`` rounded once to float32 (inf when it overflows)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class Step:
    """What the model says one update does."""

    scale: float
    tracker: int
    event: str


def model_update(scale: float, tracker: int, found_inf: float, growth_factor: float,
                 backoff_factor: float, growth_interval: int) -> Step:
    """GradScaler's update rule in plain Python: back off and reset on a non-finite step;
    otherwise count, and grow (unless growth would overflow float32) and reset when the
    count reaches growth_interval. Products are computed in double and rounded to float32
    once, as the reference kernels do."""
    if found_inf != 0:
        return Step(f32(scale * backoff_factor), 0, "back-off step (found_inf set: scale "
                    "times backoff_factor, growth_tracker reset to 0)")
    if tracker + 1 == growth_interval:
        grown = f32(scale * growth_factor)
        if math.isinf(grown):
            return Step(scale, 0, "growth step whose growth would overflow float32: the scale "
                        "stays, growth_tracker resets to 0")
        return Step(grown, 0, "growth step (growth_interval finite steps: scale times "
                    "growth_factor, growth_tracker reset to 0)")
    return Step(scale, tracker + 1, "counting step (growth_tracker counts finite steps; "
                "the scale grows only at growth_interval)")


def run_update_sequence(device: str, case: UpdateCase, numerics: str) -> None:
    """Call the kernel once per found_inf of the case and compare scale and growth
    tracker with the model after every call."""
    scale = torch.full(case.shape, case.init_scale, dtype=torch.float32, device=device)
    tracker = torch.full(case.shape, case.init_tracker, dtype=torch.int32, device=device)
    want_scale, want_tracker = f32(case.init_scale), case.init_tracker
    params = (f"growth_factor={case.growth_factor}, backoff_factor={case.backoff_factor}, "
              f"growth_interval={case.growth_interval}, initial scale {want_scale!r}, "
              f"initial growth_tracker {case.init_tracker}")
    for k, flag in enumerate(case.found_inf):
        found = torch.full(case.shape, flag, dtype=torch.float32, device=device)
        out = torch._amp_update_scale_(scale, tracker, found, case.growth_factor,
                                       case.backoff_factor, case.growth_interval)
        step = model_update(want_scale, want_tracker, flag, case.growth_factor,
                            case.backoff_factor, case.growth_interval)
        where = (f"{UPDATE} on {device}, case {case.id!r} ({case.why}; {params}), call {k} "
                 f"(found_inf={flag}, a {step.event})")
        if out is not scale:
            raise ConformanceFailure(f"{where}: returned {type(out).__name__}, expected the "
                                     "scale tensor it updates in place")
        got_scale, got_tracker = scale.item(), int(tracker.item())
        close = (got_scale == step.scale if numerics == "bitwise"
                 else math.isclose(got_scale, step.scale, rel_tol=1e-6))
        if not close:
            raise ConformanceFailure(f"{where}: scale is {got_scale!r}, expected {step.scale!r} "
                                     f"(was {want_scale!r})")
        if got_tracker != step.tracker:
            raise ConformanceFailure(f"{where}: growth_tracker is {got_tracker}, expected "
                                     f"{step.tracker} (was {want_tracker})")
        want_scale, want_tracker = step.scale, step.tracker


def check_update_meta(target: Target, case: UpdateCase) -> None:
    """Fake tensors: the in-place kernel returns its scale tensor and keeps the layouts;
    the functional variant returns a float32 scale and an int32 tracker of those shapes."""
    device = target.device
    where = f"{UPDATE} on {device}, case {case.id!r} ({case.why})"
    with target.tensors():
        scale = torch.full(case.shape, case.init_scale, dtype=torch.float32, device=device)
        tracker = torch.full(case.shape, case.init_tracker, dtype=torch.int32, device=device)
        found = torch.zeros(case.shape, dtype=torch.float32, device=device)
        before = [_layout(scale), _layout(tracker)]
        out = torch._amp_update_scale_(scale, tracker, found, case.growth_factor,
                                       case.backoff_factor, case.growth_interval)
        after = [_layout(scale), _layout(tracker)]
        functional = getattr(torch.ops.aten, "_amp_update_scale", None)
        result = (functional.default(scale, tracker, found, case.growth_factor,
                                     case.backoff_factor, case.growth_interval)
                  if functional else None)
    if out is not scale:
        raise ConformanceFailure(f"{where}: returned {type(out).__name__}, expected the scale "
                                 "tensor it updates in place")
    if before != after:
        raise ConformanceFailure(f"{where}: the in-place kernel changed a layout: before "
                                 f"{before}, after {after}")
    if result is not None:
        got = [(t.dtype, tuple(t.shape)) for t in result]
        want = [(torch.float32, case.shape), (torch.int32, case.shape)]
        if got != want:
            raise ConformanceFailure(f"{where}: the functional variant _amp_update_scale "
                                     f"returned {got}, expected {want}")
