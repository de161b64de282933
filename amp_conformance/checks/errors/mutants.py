"""Mutants of the error paths: bad autocast calls that no longer raise or warn as documented.
"""

from __future__ import annotations

import functools
import warnings

import torch

from amp_conformance.checks.mutation import (
    _AUTOCAST,
    Mutant,
    _wrap_method,
    patch,
    register,
)

# -- error paths ----------------------------------------------------------------------


def _init_accepts_invalid_device(original):
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        try:
            original(self, device_type, *args, **kwargs)
        except RuntimeError:  # silently a disabled cpu region
            original(self, "cpu", enabled=False)
    return __init__


register(Mutant(
    name="invalid-device-accepted",
    description="torch.autocast('not a real device') is accepted silently (a disabled region)",
    apply=patch(_AUTOCAST, "__init__", _init_accepts_invalid_device),
    expect="torch.autocast('not a real device') was accepted",
    select="test_invalid_device_string",
))


def _init_accepts_device_object(original):
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        if isinstance(device_type, torch.device):
            device_type = device_type.type
        original(self, device_type, *args, **kwargs)
    return __init__


register(Mutant(
    name="non-string-device-accepted",
    description="torch.autocast(torch.device('cpu')) is accepted instead of raising ValueError",
    apply=patch(_AUTOCAST, "__init__", _init_accepts_device_object),
    expect="torch.autocast(torch.device('cpu')) was accepted",
    select="test_non_string_device_type",
))


def _init_silent(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            original(self, *args, **kwargs)
    return __init__


register(Mutant(
    name="unsupported-dtype-no-warning",
    description="an unsupported autocast dtype disables autocast without the UserWarning",
    apply=patch(_AUTOCAST, "__init__", _init_silent),
    expect="no UserWarning for an unsupported autocast dtype",
    select="test_unsupported_dtype_warns_and_disables",
))


def _init_keeps_enabled(self, device_type, dtype=None, enabled=True, *args, **kwargs) -> None:
    self._enabled = enabled  # warned "Disabling autocast." and did not


register(Mutant(
    name="unsupported-dtype-not-disabled",
    description="an unsupported autocast dtype warns, but autocast stays enabled",
    apply=patch(_AUTOCAST, "__init__", _wrap_method(after=_init_keeps_enabled)),
    expect="it must be off",
    select="test_unsupported_dtype_warns_and_disables",
))


def _call_accepts_anything(original):
    @functools.wraps(original)
    def __call__(self, func):
        if not callable(func):
            return func
        return original(self, func)
    return __call__


register(Mutant(
    name="decorator-accepts-non-callable",
    description="autocast()(tensor) returns the tensor instead of raising TypeError",
    apply=patch(_AUTOCAST, "__call__", _call_accepts_anything),
    expect="torch.autocast('cpu')(a tensor) was accepted",
    select="test_decorator_rejects_non_callable",
))
register(Mutant(
    name="decorator-form-no-op",
    description="the decorator form returns the function undecorated (no region)",
    apply=patch(_AUTOCAST, "__call__", lambda original: (lambda self, func: func)),
    expect="a function decorated with torch.autocast('cpu', dtype=torch.",
    select="test_decorator_form",
))
