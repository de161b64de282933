"""Wrapper declarations for the selftest and the tests: a sound reference, and planted
broken wrappers (the mutants of ``mutants_wrappers.py``).

- ``REFERENCE``: ``torch.autocast`` declared as a RegionFactory and
  ``torch.amp.custom_fwd``/``custom_bwd`` as a ForwardDecorator; every wrapper check passes.
- ``PLANTED``: the same promises under the names ``planted.region`` and ``planted.forward``,
  whose behaviour is the reference's until a mutant plants a broken implementation
  (:func:`plant`): the selftest's baseline runs them sound, each mutant's run broken.
- ``LEAKS_DTYPE``, ``NEVER_CLEARS_CACHE``, ``FIRST_ARG_ONLY``, ``AUTOCAST_ON_INSIDE``,
  ``BACKWARD_OUTSIDE``: each broken implementation declared on its own (``--wrapper
  amp_conformance.tools.selftest.planted:LEAKS_DTYPE``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers.declare import ERROR, ForwardDecorator, RegionFactory
from amp_conformance.core.casting import is_eligible, map_tensors

DEVICE = "cpu"
PRECISIONS = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def autocast_region(precision: str, device: str) -> contextlib.AbstractContextManager:
    """torch.autocast as a region factory: "float32" turns it off, an unknown name raises."""
    if precision == "float32":
        return torch.autocast(device, enabled=False)
    return torch.autocast(device, dtype=PRECISIONS[precision])


class SwitchedRegion(contextlib.ContextDecorator):
    """A hand-made region switching the state directly, with two optional bugs."""

    def __init__(self, device: str, dtype: torch.dtype, leak_dtype_on_error: bool = False,
                 clear_cache: bool = True):
        self.device, self.dtype = device, dtype
        self.leak, self.clear = leak_dtype_on_error, clear_cache

    def __enter__(self) -> SwitchedRegion:
        self.prev = torch.is_autocast_enabled(self.device), torch.get_autocast_dtype(self.device)
        torch.set_autocast_enabled(self.device, True)
        torch.set_autocast_dtype(self.device, self.dtype)
        torch.autocast_increment_nesting()
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> bool:
        if torch.autocast_decrement_nesting() == 0 and self.clear:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(self.device, self.prev[0])
        if exc_type is None or not self.leak:  # the bug: the dtype stays after an exception
            torch.set_autocast_dtype(self.device, self.prev[1])
        return False


def leaky_region(precision: str, device: str) -> contextlib.AbstractContextManager:
    if precision == "float32":
        return torch.autocast(device, enabled=False)
    return SwitchedRegion(device, PRECISIONS[precision], leak_dtype_on_error=True)


def uncleared_region(precision: str, device: str) -> contextlib.AbstractContextManager:
    if precision == "float32":
        return torch.autocast(device, enabled=False)
    return SwitchedRegion(device, PRECISIONS[precision], clear_cache=False)


def custom_fwd(fn: Callable) -> Callable:
    return torch.amp.custom_fwd(fn, device_type=DEVICE, cast_inputs=torch.float32)


def custom_bwd(fn: Callable) -> Callable:
    return torch.amp.custom_bwd(fn, device_type=DEVICE)


def _caster(only_first: bool, disable: bool) -> Callable[[Callable], Callable]:
    def decorate(fn: Callable) -> Callable:
        def forward(*args: Any, **kwargs: Any) -> Any:
            if not torch.is_autocast_enabled(DEVICE):
                return fn(*args, **kwargs)
            def cast(t: Any) -> Any:
                return t.to(torch.float32) if is_eligible(t, DEVICE) else t
            if only_first:  # the bug: the other inputs are left as they are
                args = (map_tensors(cast, args[0]), *args[1:])
            else:
                args, kwargs = map_tensors(cast, args), map_tensors(cast, kwargs)
            region = torch.autocast(DEVICE, enabled=False) if disable else contextlib.nullcontext()
            with region:
                return fn(*args, **kwargs)
        return forward
    return decorate


first_arg_only = _caster(only_first=True, disable=True)
autocast_on_inside = _caster(only_first=False, disable=False)


def no_backward_state(fn: Callable) -> Callable:
    """custom_bwd's role, not done: backward runs in whatever state it is called in."""
    return fn


def region_decl(name: str, make: Callable, **extra: Any) -> RegionFactory:
    return RegionFactory(name=name, make=make, devices=(DEVICE,), precisions=PRECISIONS,
                         float32_names=("float32",), unknown=ERROR, decorator=True,
                         library="torch", version=torch.__version__, **extra)


def forward_decl(name: str, decorate: Callable, backward: Callable | None) -> ForwardDecorator:
    return ForwardDecorator(name=name, decorate=decorate, cast_dtype=torch.float32,
                            casts_on=(DEVICE,), devices=(DEVICE,), decorate_backward=backward,
                            library="torch", version=torch.__version__)


REFERENCE = [region_decl("torch.autocast", autocast_region),
             forward_decl("torch.amp.custom_fwd", custom_fwd, custom_bwd)]

#: the implementations PLANTED delegates to; a mutant plants a broken one
SOUND = {"make": autocast_region, "decorate": custom_fwd, "decorate_backward": custom_bwd}
_PLANTED: dict[str, Callable] = dict(SOUND)


def plant(**implementations: Callable) -> Callable[[], None]:
    """Plant broken implementations into PLANTED; returns the undo."""
    _PLANTED.update(implementations)
    return lambda: _PLANTED.update(SOUND)


PLANTED = [
    region_decl("planted.region", lambda p, d: _PLANTED["make"](p, d)),
    forward_decl("planted.forward", lambda fn: _PLANTED["decorate"](fn),
                 lambda fn: _PLANTED["decorate_backward"](fn)),
]

LEAKS_DTYPE = region_decl("planted.leaks_dtype", leaky_region)
NEVER_CLEARS_CACHE = region_decl("planted.never_clears_cache", uncleared_region)
FIRST_ARG_ONLY = forward_decl("planted.first_arg_only", first_arg_only, None)
AUTOCAST_ON_INSIDE = forward_decl("planted.autocast_on_inside", autocast_on_inside, None)
BACKWARD_OUTSIDE = forward_decl("planted.backward_outside", custom_fwd, no_backward_state)
