"""GradScaler: float16 autocast is unusable without gradient scaling, so a device with
autocast must implement ``_amp_foreach_non_finite_check_and_unscale_`` and
``_amp_update_scale_`` and make ``torch.amp.GradScaler(device)`` work.

Kernels are checked against plain tensor ops and a pure-Python model; the scaler's
methods against their contract; scaled training against an unscaled control. With
``--fake`` only the kernels' in-place shape and dtype semantics are checked; everything
else needs values (and GradScaler turns itself off without the device).
Logic: :mod:`amp_conformance.checks.gradscaler`.
"""

import math

import pytest
import torch

from amp_conformance.checks import defects, fake_casts, profiles
from amp_conformance.checks.gradscaler import cases, kernels, protocol, scaler, sparse, training
from amp_conformance.checks.gradscaler.update_property import check_update_property
from amp_conformance.core.errors import describe_error, signature

pytestmark = pytest.mark.amp_check("gradscaler")

_NO_SCALER = "GradScaler turns itself off without the device, and fake tensors carry no values"


def _needs_values(target, what: str) -> None:
    if target.fake:
        pytest.skip(f"not applicable in --fake mode: {what}")


def _unscale_verdict(target, case, run, record_property) -> None:
    """Run an unscale check; where the case meets PyTorch's own kernel gap (bfloat16 on
    CUDA), a device without that kernel reproduces the reference defect."""
    defect = kernels.known_defect(target, case)
    if defect is None:
        run()
    else:
        defects.known_departure(defect, run, kernels.NO_KERNEL, record_property)


# -- the kernels ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", cases.UNSCALE_CASES, ids=cases.ids(cases.UNSCALE_CASES))
def test_gradscaler_unscale_kernel(amp_settings, amp_target, amp_device, case, record_property):
    """found_inf and the unscaled gradients equal the reference computed with plain ops."""
    _needs_values(amp_target, "unscaled values and found_inf need real tensors")
    _unscale_verdict(amp_target, case,
                     lambda: kernels.check_unscale(amp_target, case, amp_settings.numerics),
                     record_property)


@pytest.mark.parametrize("case", cases.UNSCALE_CASES, ids=cases.ids(cases.UNSCALE_CASES))
def test_gradscaler_unscale_kernel_meta(amp_target, amp_device, case, record_property):
    """In place: every gradient keeps its dtype, shape and strides (also on fake tensors)."""
    _unscale_verdict(amp_target, case, lambda: kernels.check_unscale_meta(amp_target, case),
                     record_property)


@pytest.mark.parametrize("case", cases.UPDATE_CASES, ids=cases.ids(cases.UPDATE_CASES))
def test_gradscaler_update_kernel(amp_settings, amp_target, amp_device, case):
    """Growth, back-off, growth_interval and the tracker over a sequence of steps."""
    _needs_values(amp_target, "the scale and growth tracker need real tensors")
    kernels.run_update_sequence(amp_device, case, amp_settings.numerics)


@pytest.mark.parametrize("case", cases.UPDATE_CASES, ids=cases.ids(cases.UPDATE_CASES))
def test_gradscaler_update_kernel_meta(amp_target, amp_device, case):
    kernels.check_update_meta(amp_target, case)


def test_gradscaler_update_kernel_property(amp_settings, amp_target, amp_device):
    """Random finite/non-finite sequences and factors against the pure-Python model."""
    _needs_values(amp_target, "the scale and growth tracker need real tensors")
    check_update_property(amp_device, amp_settings.numerics, profiles.selected())


# -- the scaler's contract ----------------------------------------------------------------------


def test_gradscaler_scale_outputs(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_scale_outputs(amp_device)


def test_gradscaler_lazy_init(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_lazy_init(amp_device)


def test_gradscaler_unscale_once(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_unscale_once(amp_device)


@pytest.mark.parametrize("plant", [None, math.inf, -math.inf, math.nan],
                         ids=["finite", "inf", "neg_inf", "nan"])
def test_gradscaler_step(amp_target, amp_device, plant):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_step(amp_device, plant)


def test_gradscaler_refuses_fp16_grads(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_refuses_fp16_grads(amp_device)


def test_gradscaler_update(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_update_follows_model(amp_device)


def test_gradscaler_update_new_scale(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_update_new_scale(amp_device)


def test_gradscaler_disabled(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_disabled(amp_device)


@pytest.mark.parametrize("initialised", [False, True], ids=["lazy", "initialised"])
def test_gradscaler_state_dict(amp_target, amp_device, initialised):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_state_dict(amp_device, initialised)


@pytest.mark.parametrize("initialised", [False, True], ids=["lazy", "initialised"])
def test_gradscaler_pickle(amp_target, amp_device, initialised):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_pickle(amp_device, initialised)


@pytest.mark.parametrize("how", ["state_dict", "pickle"])
def test_gradscaler_resume(amp_target, amp_device, how):
    _needs_values(amp_target, _NO_SCALER)
    scaler.check_resume(amp_device, how)


@pytest.mark.parametrize("workflow", cases.WORKFLOWS)
@pytest.mark.amp_needs("autograd")
def test_gradscaler_workflow(amp_target, amp_device, workflow):
    """Clipping, clipping after unscale_, gradient penalty, accumulation, several models
    and optimizers: scaled equals unscaled."""
    _needs_values(amp_target, _NO_SCALER)
    training.check_workflow(amp_target, workflow)


# -- what callers rely on across calls ---------------------------------------------------------


def test_gradscaler_state_identity(amp_target, amp_device):
    """The scale and growth-tracker tensors are made once and updated in place by every
    method: a reference a caller holds stays live."""
    _needs_values(amp_target, _NO_SCALER)
    protocol.check_state_identity(amp_device)


def test_gradscaler_state_identity_meta(amp_target):
    """The value-free part, also on fake tensors: dtypes kept, state tensors kept."""
    try:
        reason = protocol.check_state_identity_meta(amp_target)
    except Exception as exc:
        limit = fake_casts.not_applicable(exc) if amp_target.fake else None
        if limit is None:
            raise
        reason = str(limit)
    if reason:
        pytest.skip(reason)


def test_gradscaler_setters(amp_target, amp_device):
    _needs_values(amp_target, _NO_SCALER)
    protocol.check_setters(amp_device)


@pytest.mark.parametrize("case", list(protocol.PROTOCOL_CASES))
def test_gradscaler_optimizer_protocol(amp_target, amp_device, case):
    """An optimizer that unscales in its own step gets grad_scale (times its own) and
    found_inf for that step only, and decides itself."""
    _needs_values(amp_target, _NO_SCALER)
    protocol.check_optimizer_protocol(amp_device, case)


@pytest.mark.amp_needs("float64")
@pytest.mark.parametrize("plant_in", [None, *range(len(protocol.DTYPE_GROUPS))],
                         ids=["finite", *(f"inf_in_{str(d).removeprefix('torch.')}"
                                          for d in protocol.DTYPE_GROUPS)])
def test_gradscaler_dtype_groups(amp_target, amp_device, plant_in):
    """One optimizer with gradients of several dtypes is unscaled as one: an inf in any
    group skips the step for all."""
    _needs_values(amp_target, _NO_SCALER)
    protocol.check_dtype_groups(amp_device, plant_in)


# -- scaled training against the control ------------------------------------------------------


def _scaled_dtype(settings):
    """GradScaler exists for float16: the device's float16 where it has it."""
    dtypes = settings.amp_dtypes
    return torch.float16 if torch.float16 in dtypes else dtypes[0]


@pytest.mark.parametrize("order", list(cases.ORDERS))
@pytest.mark.parametrize("impl", ["plain", "foreach"])
@pytest.mark.parametrize("optimizer", cases.OPTIMIZERS, ids=cases.ids(cases.OPTIMIZERS))
@pytest.mark.amp_needs("autograd")
def test_gradscaler_training(amp_settings, amp_target, amp_device, optimizer, impl, order):
    """SGD/Adam/AdamW in every documented call order, under autocast of the device's
    float16: scaled equals the unscaled control; a step with an inf or a nan is skipped."""
    _needs_values(amp_target, _NO_SCALER)
    training.check_training(amp_target, _scaled_dtype(amp_settings), optimizer, impl, order)


@pytest.mark.parametrize("order", cases.CAPTURABLE_ORDERS)
@pytest.mark.parametrize("optimizer", cases.CAPTURABLE, ids=cases.ids(cases.CAPTURABLE))
@pytest.mark.amp_needs("autograd")
def test_gradscaler_training_capturable(amp_settings, amp_target, amp_device, optimizer, order):
    """capturable=True Adam/AdamW, as the other implementations, in the order that meets
    every method (unscale_, clipping, step, update); where torch keeps no capturable state
    for the device, the same step without scaler or autocast raises the same way (shown on
    the item) and it does not apply."""
    _needs_values(amp_target, _NO_SCALER)
    try:
        training.check_training(amp_target, _scaled_dtype(amp_settings), optimizer,
                                "capturable", order)
    except Exception as exc:
        alone = training.refusal(optimizer, "capturable", amp_device)
        if alone is None or signature(alone) != signature(exc):
            raise
        pytest.skip(f"not applicable: torch.optim.{training.label(optimizer, 'capturable')} "
                    f"raises without GradScaler and autocast too: {describe_error(alone)}")


@pytest.mark.amp_check("gradscaler_fused")
@pytest.mark.parametrize("order", list(cases.ORDERS))
@pytest.mark.parametrize("optimizer", cases.OPTIMIZERS, ids=cases.ids(cases.OPTIMIZERS))
@pytest.mark.amp_needs("autograd")
def test_gradscaler_training_fused(amp_settings, amp_target, amp_device, optimizer, order):
    """fused=True optimizers take the scaler's grad_scale/found_inf path instead: never
    unscaled twice after unscale_, skipped on an inf or a nan."""
    training.check_training(amp_target, _scaled_dtype(amp_settings), optimizer, "fused", order)


# -- sparse gradients ---------------------------------------------------------------------------


@pytest.mark.amp_check("gradscaler_sparse")
@pytest.mark.parametrize("case", cases.SPARSE_CASES, ids=cases.ids(cases.SPARSE_CASES))
def test_gradscaler_sparse(amp_device, case):
    sparse.check_sparse(amp_device, case)


@pytest.mark.amp_check("gradscaler_sparse")
@pytest.mark.amp_needs("autograd")
def test_gradscaler_sparse_embedding(amp_target, amp_dtype):
    sparse.check_sparse_embedding(amp_target, amp_dtype)
