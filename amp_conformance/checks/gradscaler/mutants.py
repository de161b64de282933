"""Mutants of the GradScaler tier (scaling kernels and the scaler's methods):
broken implementations its checks must catch.

The kernels are replaced at the CPU dispatch key by Python kernels that do the right
thing except for one planted bug (what a backend's own kernel could get wrong); the
scaler's methods are patched on ``torch.amp.GradScaler``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
from torch.amp.grad_scaler import GradScaler, OptState

from amp_conformance.checks.gradscaler.kernels import f32
from amp_conformance.checks.mutation import Mutant, Undo, override_kernel, patch, register

UNSCALE_OP = "_amp_foreach_non_finite_check_and_unscale_"
UPDATE_OP = "_amp_update_scale_"
UNSCALE_CHECKS = "test_gradscaler_unscale_kernel and not meta"
UPDATE_CHECKS = "test_gradscaler_update_kernel and not meta"


def _nonfinite(g: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(g)


def unscale_kernel(flags: Callable[[torch.Tensor], torch.Tensor] = _nonfinite, *,
                   clears: bool = False, factor_in_grad_dtype: bool = False,
                   contiguous_copy: bool = False) -> Callable:
    """A Python unscale kernel, right but for the one bug its options plant."""
    def kernel(grads, found_inf, inv_scale):
        bad = False
        for g in grads:
            bad = bad or bool(flags(g).any())
            factor = inv_scale.to(g.dtype).float() if factor_in_grad_dtype else inv_scale
            target = g.contiguous() if contiguous_copy else g  # a copy when non-contiguous
            target.copy_((g.float() * factor).to(g.dtype))
        if bad:
            found_inf.fill_(1.0)
        elif clears:
            found_inf.fill_(0.0)
    return kernel


def update_kernel(*, backs_off: bool = True, resets_tracker: bool = True,
                  early: bool = False) -> Callable:
    """A Python update-scale kernel, right but for the one bug its options plant."""
    def kernel(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
        if found_inf.item():
            if backs_off:
                scale.fill_(f32(scale.item() * backoff_factor))
            if resets_tracker:
                tracker.zero_()
            return scale
        count = int(tracker.item()) + 1
        if count == growth_interval or (early and count == growth_interval - 1):
            grown = f32(scale.item() * growth_factor)
            if not math.isinf(grown):
                scale.fill_(grown)
            tracker.zero_()
        else:
            tracker.fill_(count)
        return scale
    return kernel


def cpu_kernel(op: str, kernel: Callable) -> Callable[[], Undo]:
    return lambda: override_kernel(op, "CPU", lambda redispatch: kernel)


# -- the unscale kernel ----------------------------------------------------------------------

register(Mutant(
    name="unscale-ignores-nan",
    description="the CPU unscale kernel flags inf but not nan gradients",
    apply=cpu_kernel(UNSCALE_OP, unscale_kernel(torch.isinf)),
    expect=(UNSCALE_OP, "holds a nan value"),
    select=UNSCALE_CHECKS,
))
register(Mutant(
    name="unscale-ignores-neg-inf",
    description="the CPU unscale kernel flags nan and +inf, not -inf (checks g == inf)",
    apply=cpu_kernel(UNSCALE_OP, unscale_kernel(lambda g: g.isnan() | (g == math.inf))),
    expect=(UNSCALE_OP, "holds a -inf value"),
    select=UNSCALE_CHECKS,
))
def _without_bfloat16(grads, found_inf, inv_scale):
    if any(g.dtype == torch.bfloat16 for g in grads):
        raise NotImplementedError(f'"{UNSCALE_OP}" not implemented for \'BFloat16\'')
    unscale_kernel()(grads, found_inf, inv_scale)


register(Mutant(
    name="unscale-no-bfloat16",
    description="the CPU unscale kernel has no bfloat16 implementation (PyTorch's CUDA kernel "
                "in torch 2.11, a reference defect there; on CPU a departure)",
    apply=cpu_kernel(UNSCALE_OP, _without_bfloat16),
    expect=(UNSCALE_OP, "has no implementation for gradients of dtypes bfloat16"),
    select="test_gradscaler_unscale_kernel",
))
register(Mutant(
    name="unscale-clears-found-inf",
    description="the CPU unscale kernel writes found_inf = 0 for finite gradients, clearing "
                "what an earlier call (another dtype's gradients) found",
    apply=cpu_kernel(UNSCALE_OP, unscale_kernel(clears=True)),
    expect=(UNSCALE_OP, "never clear it"),
    select=UNSCALE_CHECKS,
))
register(Mutant(
    name="unscale-inv-scale-in-grad-dtype",
    description="the CPU unscale kernel rounds inv_scale to the gradient's dtype before "
                "multiplying (float16/bfloat16 gradients get a wrong factor)",
    apply=cpu_kernel(UNSCALE_OP, unscale_kernel(factor_in_grad_dtype=True)),
    expect=(UNSCALE_OP, "'inv_scale-third'", "is not the reference"),
    select=UNSCALE_CHECKS,
))
register(Mutant(
    name="unscale-strided-grads-copied",
    description="the CPU unscale kernel works on grad.contiguous(): a non-contiguous "
                "gradient is unscaled in a copy and left scaled",
    apply=cpu_kernel(UNSCALE_OP, unscale_kernel(contiguous_copy=True)),
    expect=(UNSCALE_OP, "non-contiguous", "is not the reference"),
    select=UNSCALE_CHECKS,
))

# -- the update kernel -----------------------------------------------------------------------

register(Mutant(
    name="update-never-backs-off",
    description="the CPU update kernel resets the tracker on found_inf but keeps the scale",
    apply=cpu_kernel(UPDATE_OP, update_kernel(backs_off=False)),
    expect=(UPDATE_OP, "back-off step", "scale is"),
    select=UPDATE_CHECKS,
))
register(Mutant(
    name="update-tracker-not-reset",
    description="the CPU update kernel backs off on found_inf but keeps the growth tracker",
    apply=cpu_kernel(UPDATE_OP, update_kernel(resets_tracker=False)),
    expect=(UPDATE_OP, "back-off step", "growth_tracker is"),
    select=UPDATE_CHECKS,
))
register(Mutant(
    name="update-grows-too-early",
    description="the CPU update kernel grows the scale one finite step before growth_interval",
    apply=cpu_kernel(UPDATE_OP, update_kernel(early=True)),
    expect=(UPDATE_OP, "counting step"),
    select=UPDATE_CHECKS,
))

# -- the scaler's methods --------------------------------------------------------------------


def _always_steps(original):
    @functools.wraps(original)
    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)  # found_inf never consulted
    return _maybe_opt_step


def _drops_growth_tracker(original):
    @functools.wraps(original)
    def load_state_dict(self, state_dict):
        original(self, {**state_dict, "_growth_tracker": 0})
    return load_state_dict


def _unscale_twice(original):
    @functools.wraps(original)
    def unscale_(self, optimizer):
        if self._enabled:
            state = self._per_optimizer_states[id(optimizer)]
            if state["stage"] is OptState.UNSCALED:
                state["stage"] = OptState.READY  # the guard forgotten
        return original(self, optimizer)
    return unscale_


def _fused_found_inf_zeroed(original):
    @functools.wraps(original)
    def _check_inf_per_device(self, optimizer):
        found = original(self, optimizer)
        for t in found.values():
            t.zero_()
        return found
    return _check_inf_per_device


register(Mutant(
    name="step-not-skipped-on-inf",
    description="GradScaler.step calls optimizer.step() whatever found_inf says",
    apply=patch(GradScaler, "_maybe_opt_step", _always_steps),
    expect=("GradScaler.step", "must be skipped"),
    select="test_gradscaler_step",
))
register(Mutant(
    name="load-state-dict-drops-growth-tracker",
    description="GradScaler.load_state_dict restores scale and factors, not _growth_tracker",
    apply=patch(GradScaler, "load_state_dict", _drops_growth_tracker),
    expect=("GradScaler.load_state_dict", "_growth_tracker"),
    select="test_gradscaler_state_dict or test_gradscaler_resume",
))
register(Mutant(
    name="unscale-twice-allowed",
    description="GradScaler.unscale_ no longer refuses a second call before step()",
    apply=patch(GradScaler, "unscale_", _unscale_twice),
    expect=("GradScaler.unscale_", "twice"),
    select="test_gradscaler_unscale_once",
))
register(Mutant(
    name="fused-step-ignores-inf",
    description="for fused optimizers GradScaler hands over a found_inf that is always 0, so "
                "the fused step runs on inf gradients",
    apply=patch(GradScaler, "_check_inf_per_device", _fused_found_inf_zeroed),
    expect=("GradScaler.step", "fused=True", "must be skipped"),
    select="test_gradscaler_training_fused",
))


def _fused_after_unscale(change: Callable[[dict], None]):
    """GradScaler.step with ``change`` applied to a fused optimizer's state after unscale_."""
    def wrap(original):
        @functools.wraps(original)
        def step(self, optimizer, *args, **kwargs):
            state = self._per_optimizer_states[id(optimizer)]
            if (self._enabled and getattr(optimizer, "_step_supports_amp_scaling", False)
                    and state["stage"] is OptState.UNSCALED):
                change(state)
            return original(self, optimizer, *args, **kwargs)
        return step
    return wrap


def _forget_unscaled(state: dict) -> None:
    state["stage"] = OptState.READY  # so step hands grad_scale over again


def _clear_found_inf(state: dict) -> None:
    for t in state["found_inf_per_device"].values():
        t.zero_()


register(Mutant(
    name="fused-step-unscales-twice",
    description="after an explicit unscale_, GradScaler.step still hands a fused optimizer "
                "grad_scale, so its gradients are unscaled a second time",
    apply=patch(GradScaler, "step", _fused_after_unscale(_forget_unscaled)),
    expect=("fused=True", "unscale_ -> step", "differs from the unscaled control"),
    select="test_gradscaler_training_fused",
))
register(Mutant(
    name="fused-step-on-inf-after-unscale",
    description="after an explicit unscale_, GradScaler.step hands a fused optimizer a "
                "found_inf of 0, so it steps on the inf or nan unscale_ found",
    apply=patch(GradScaler, "step", _fused_after_unscale(_clear_found_inf)),
    expect=("GradScaler.step", "fused=True", "unscale_ ->", "must be skipped"),
    select="test_gradscaler_training_fused",
))


def _replaces_scale(original):
    @functools.wraps(original)
    def update(self, new_scale=None):
        original(self, new_scale)
        if self._enabled and self._scale is not None:
            self._scale = self._scale.clone()  # a fresh tensor: held references go stale
    return update


def _ignores_own_grad_scale(original):
    @functools.wraps(original)
    def step(self, optimizer, *args, **kwargs):
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            vars(optimizer).pop("grad_scale", None)  # the optimizer's own scale overwritten
        return original(self, optimizer, *args, **kwargs)
    return step


def _found_inf_per_dtype(original):
    @functools.wraps(original)
    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        kernel = torch._amp_foreach_non_finite_check_and_unscale_

        def afresh(grads, found, inv):
            found.zero_()  # each dtype's call starts over: only the last dtype's verdict stays
            kernel(grads, found, inv)
        torch._amp_foreach_non_finite_check_and_unscale_ = afresh
        try:
            return original(self, optimizer, inv_scale, found_inf, allow_fp16)
        finally:
            torch._amp_foreach_non_finite_check_and_unscale_ = kernel
    return _unscale_grads_


register(Mutant(
    name="update-replaces-scale-tensor",
    description="GradScaler.update makes a new scale tensor instead of updating it in place: "
                "a reference a caller holds (a captured graph) keeps the old scale",
    apply=patch(GradScaler, "update", _replaces_scale),
    expect=("state identity", "new _scale tensor"),
    select="test_gradscaler_state_identity",
))
register(Mutant(
    name="step-overwrites-optimizer-grad-scale",
    description="GradScaler.step hands an optimizer that unscales itself the scaler's scale "
                "alone, dropping the grad_scale the optimizer set",
    apply=patch(GradScaler, "step", _ignores_own_grad_scale),
    expect=("optimizer-side protocol, user_grad_scale", "(grad_scale, found_inf)"),
    select="test_gradscaler_optimizer_protocol",
))
register(Mutant(
    name="found-inf-lost-between-dtypes",
    description="GradScaler unscales each gradient dtype with a found_inf of its own and keeps "
                "the last: an inf in an earlier dtype's gradients is lost and the step runs",
    apply=patch(GradScaler, "_unscale_grads_", _found_inf_per_dtype),
    expect=("dtype groups, inf in the torch.float32 group", "must skip the step"),
    select="test_gradscaler_dtype_groups",
))
