"""The custom_fwd family's properties (checks/custom_fwd) catch a broken ``custom_fwd``
``cast_inputs`` (``_cast``) and a broken ``custom_bwd``.

Each test plants one bug (a monkeypatched ``_cast``, ``custom_fwd`` or ``custom_bwd``),
runs the property under the ``ci`` profile and asserts it fails naming the broken
property; every patch is undone by ``monkeypatch``, and the autocast state is checked to
be what it was. The counterpart, each property passing on the real implementation, is the
conformance suite itself.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.amp import autocast_mode

from amp_conformance.checks.custom_fwd import check as cfp
from tests.mutants import CPU, property_fails

pytestmark = pytest.mark.usefixtures("state_restored")


# -- custom_fwd's cast_inputs ----------------------------------------------------------

#: Each cast_inputs bug is caught by the suite's run (explicit examples first) and by the
#: generated examples alone: the generator reaches it, not only the hand-written cases.
PROFILES = pytest.mark.parametrize("profile", ["ci", "ci_generated"], indirect=True)


@pytest.fixture
def profile(request, ci, ci_generated):
    return {"ci": ci, "ci_generated": ci_generated}[request.param]


def _cast_without_dicts(real: Callable) -> Callable:
    def _cast(value, device_type, dtype):
        if isinstance(value, dict):
            return value  # the bug: no recursion into dicts
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    return _cast


@PROFILES
def test_cast_property_catches_cast_not_recursing_into_dicts(monkeypatch, profile):
    """(b) a _cast that does not recurse into dicts leaves their tensors uncast."""
    monkeypatch.setattr(autocast_mode, "_cast", _cast_without_dicts(autocast_mode._cast))
    property_fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
                   cfp.CAST_PROPERTY, "should arrive cast", "reproduce:")


@PROFILES
def test_cast_property_catches_cast_of_float64(monkeypatch, profile):
    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
            return value.to(dtype)  # the bug: float64 treated as eligible
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    real = autocast_mode._cast
    monkeypatch.setattr(autocast_mode, "_cast", _cast)
    property_fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
                   cfp.CAST_PROPERTY, "float64", "must reach forward untouched")


@PROFILES
def test_cast_property_catches_arrays_treated_as_iterables(monkeypatch, profile):
    """Without the ndarray special case an array would arrive as a generator."""
    pytest.importorskip("numpy", reason="the payloads hold numpy arrays only where it is installed")
    monkeypatch.setattr(autocast_mode, "HAS_NUMPY", False)
    property_fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
                   cfp.CAST_PROPERTY, "ndarray", "same object")


@PROFILES
def test_cast_property_catches_cast_of_other_device(monkeypatch, profile):
    """A _cast blind to the device: floating tensors of another device (meta beside cpu)
    are cast too."""
    real = autocast_mode._cast

    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.device.type != device_type:
            return value.to(dtype) if value.is_floating_point() and value.dtype != torch.float64 \
                else value  # the bug: any device is eligible
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    monkeypatch.setattr(autocast_mode, "_cast", _cast)
    property_fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
                   cfp.CAST_PROPERTY, "tensor on meta must reach forward untouched")


def test_cast_property_catches_forward_left_in_autocast(monkeypatch, ci):
    """A custom_fwd that casts but leaves autocast on while forward runs."""

    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        if fwd is None:
            return lambda f: custom_fwd(f, device_type=device_type, cast_inputs=cast_inputs)

        def decorate(*args, **kwargs):
            args[0]._dtype = torch.get_autocast_dtype(device_type)
            args[0]._fwd_used_autocast = False
            if cast_inputs is not None and torch.is_autocast_enabled(device_type):
                return fwd(*autocast_mode._cast(args, device_type, cast_inputs),
                           **autocast_mode._cast(kwargs, device_type, cast_inputs))
            return fwd(*args, **kwargs)

        return decorate

    monkeypatch.setattr(torch.amp, "custom_fwd", custom_fwd)
    property_fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, ci),
                   cfp.FORWARD_STATE_PROPERTY, "runs with autocast off")


# -- custom_bwd ------------------------------------------------------------------------


def test_backward_property_catches_custom_bwd_ignoring_forward_state(monkeypatch, ci):
    """(c) a custom_bwd that runs backward in whatever state backward() is called from."""

    def custom_bwd(bwd=None, *, device_type):
        return (lambda f: f) if bwd is None else bwd

    monkeypatch.setattr(torch.amp, "custom_bwd", custom_bwd)
    property_fails(lambda: cfp.check_backward_property(CPU, ci), cfp.BACKWARD_PROPERTY,
                   "reproduce:", "y.float().sum().backward()")


def test_backward_property_catches_custom_bwd_with_default_dtype(monkeypatch, ci):
    """A custom_bwd that restores the enabled flag but not the forward's dtype."""

    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return lambda f: custom_bwd(f, device_type=device_type)

        def decorate(*args, **kwargs):
            with torch.autocast(device_type, enabled=args[0]._fwd_used_autocast):
                return bwd(*args, **kwargs)

        return decorate

    monkeypatch.setattr(torch.amp, "custom_bwd", custom_bwd)
    property_fails(lambda: cfp.check_backward_property(CPU, ci), cfp.BACKWARD_PROPERTY)
