"""Mutants of ``torch.amp.custom_fwd`` / ``custom_bwd``: inputs not cast, the forward's state
not carried into backward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.mutation import (
    Mutant,
    Undo,
    patch,
    patches,
    register,
)

# -- custom_fwd / custom_bwd ----------------------------------------------------------

_AMP_MODULE = torch.amp.autocast_mode


def _on_torch_amp(name: str, make: Callable[[Any], Any]) -> Callable[[], Undo]:
    """Patch a decorator where users (and the suite) look it up: ``torch.amp.<name>``
    and ``torch.amp.autocast_mode.<name>``."""
    return patches(patch(torch.amp, name, make), patch(_AMP_MODULE, name, make))


def _fwd_ignores_cast_inputs(original):
    @functools.wraps(original)
    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        return original(fwd, device_type=device_type)  # cast_inputs dropped
    return custom_fwd


def _fwd_keeps_autocast(original):
    """cast_inputs honoured, but forward runs in the caller's (enabled) autocast state."""
    @functools.wraps(original)
    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        if fwd is None:
            return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

        @functools.wraps(fwd)
        def decorate_fwd(*args, **kwargs):
            args[0]._dtype = torch.get_autocast_dtype(device_type)
            args[0]._fwd_used_autocast = torch.is_autocast_enabled(device_type)
            if cast_inputs is not None and torch.is_autocast_enabled(device_type):
                args = _AMP_MODULE._cast(args, device_type, cast_inputs)
                kwargs = _AMP_MODULE._cast(kwargs, device_type, cast_inputs)
            return fwd(*args, **kwargs)
        return decorate_fwd
    return custom_fwd


def _cast_float64_too(original):
    @functools.wraps(original)
    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64 \
                and value.device.type == device_type:
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        return original(value, device_type, dtype)
    return _cast


def _bwd_ignores_forward_state(original):
    @functools.wraps(original)
    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)
        return bwd  # backward runs in whatever state backward() was called from
    return custom_bwd


def _bwd_default_dtype(original):
    @functools.wraps(original)
    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)

        @functools.wraps(bwd)
        def decorate_bwd(*args, **kwargs):
            # the forward's enabled flag, but the device's default dtype, not the forward's
            with torch.autocast(device_type, enabled=args[0]._fwd_used_autocast):
                return bwd(*args, **kwargs)
        return decorate_bwd
    return custom_bwd


register(Mutant(
    name="custom_fwd-ignores-cast_inputs",
    description="torch.amp.custom_fwd drops cast_inputs: forward gets uncast inputs in the "
                "caller's autocast state",
    apply=_on_torch_amp("custom_fwd", _fwd_ignores_cast_inputs),
    expect="custom_fwd(cast_inputs=...) casts exactly the eligible tensors",
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_fwd-casts-float64",
    description="custom_fwd's cast_inputs casts float64 tensors too",
    apply=patch(_AMP_MODULE, "_cast", _cast_float64_too),
    expect=("custom_fwd(cast_inputs=...) casts exactly the eligible tensors", "torch.float64"),
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_fwd-forward-keeps-autocast",
    description="custom_fwd casts the inputs but runs forward with autocast still enabled",
    apply=_on_torch_amp("custom_fwd", _fwd_keeps_autocast),
    expect="custom_fwd runs forward with autocast off when it casts",
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_bwd-ignores-forward-state",
    description="torch.amp.custom_bwd runs backward in the caller's state, not the forward's",
    apply=_on_torch_amp("custom_bwd", _bwd_ignores_forward_state),
    expect="custom_bwd runs backward with the forward's autocast state",
    select="test_backward_runs_in_forward_state",
))
register(Mutant(
    name="custom_bwd-default-dtype",
    description="custom_bwd re-enters the forward's enabled flag but the device's default "
                "dtype, not the forward's",
    apply=_on_torch_amp("custom_bwd", _bwd_default_dtype),
    expect="custom_bwd runs backward with the forward's autocast state",
    select="test_backward_runs_in_forward_state",
))
