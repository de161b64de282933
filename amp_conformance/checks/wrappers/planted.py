"""Wrapper declarations for the selftest and the tests: a sound reference, and planted
broken wrappers (the mutants of ``mutants_wrappers.py``).

- ``REFERENCE``: ``torch.autocast`` declared as a RegionFactory and
  ``torch.amp.custom_fwd``/``custom_bwd`` as a ForwardDecorator; every wrapper check passes.
- ``PLANTED``: the same promises under the names ``planted.region`` and ``planted.forward``
  (and the region swap, predicate and scaler of ``planted_shapes.py``),
  whose behaviour is the reference's until a mutant plants a broken implementation
  (:func:`plant`): the selftest's baseline runs them sound, each mutant's run broken.
- ``LEAKS_DTYPE``, ``NEVER_CLEARS_CACHE``, ``FIRST_ARG_ONLY``, ``AUTOCAST_ON_INSIDE``,
  ``BACKWARD_OUTSIDE``, ``SKIPS_WHEN_ON``, ``STALE``, ``SHARED_STACK``,
  ``CLEARS_EVERY_EXIT``, ``NO_FINALLY_DECORATOR``, ``CASTS_OUTSIDE``, ``TOP_LEVEL_ONLY``,
  ``CASTS_FLOAT64``, ``DISABLES_WITHOUT_FINALLY``, ``DETACHES``: each broken
  implementation declared on its own (``--wrapper
  amp_conformance.checks.wrappers.planted:LEAKS_DTYPE``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers import planted_islands, planted_shapes
from amp_conformance.checks.wrappers.declare import (
    ERROR,
    Float32Island,
    ForwardDecorator,
    RegionFactory,
    RegionRunner,
    float32_body,
)
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


class SkipsWhenOn(SwitchedRegion):
    """Enters nothing when autocast is already on in its dtype, yet turns it off on exit:
    inside itself, the rest of the outer region runs without autocast."""

    def __enter__(self) -> SwitchedRegion:
        self.skipped = (torch.is_autocast_enabled(self.device)
                        and torch.get_autocast_dtype(self.device) == self.dtype)
        return self if self.skipped else super().__enter__()

    def __exit__(self, *exc: Any) -> bool:
        if self.skipped:
            torch.set_autocast_enabled(self.device, False)  # the bug
            return False
        return super().__exit__(*exc)


class StaleRegion(SwitchedRegion):
    """Saves the state to restore when it is made, not when it is entered: entered again
    later, it restores a state that is long gone."""

    def __init__(self, device: str, dtype: torch.dtype):
        super().__init__(device, dtype)
        self.saved = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)

    def __enter__(self) -> SwitchedRegion:
        super().__enter__()
        self.prev = self.saved  # the bug
        return self


_SHARED_STACK: list[tuple[bool, torch.dtype]] = []


class SharedStackRegion(SwitchedRegion):
    """Keeps the states to restore on one process-wide stack instead of a per-thread one:
    two threads' regions that overlap restore each other's state."""

    def __enter__(self) -> SwitchedRegion:
        super().__enter__()
        _SHARED_STACK.append(self.prev)
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.prev = _SHARED_STACK.pop()  # the bug: maybe another thread's
        return super().__exit__(*exc)


class ClearsEveryExit(SwitchedRegion):
    """Clears the cast cache at every exit, not only the outermost one."""

    def __exit__(self, *exc: Any) -> bool:
        torch.clear_autocast_cache()  # the bug
        return super().__exit__(*exc)


class NoFinallyDecorator(SwitchedRegion):
    """A decorator form of its own that restores the state only when the function returns."""

    def __call__(self, fn: Callable) -> Callable:
        def run(*args: Any, **kwargs: Any) -> Any:
            self.__enter__()
            out = fn(*args, **kwargs)  # the bug: no try/finally
            self.__exit__(None, None, None)
            return out
        return run


def _switched(cls: type) -> Callable[[str, str], contextlib.AbstractContextManager]:
    def make(precision: str, device: str) -> contextlib.AbstractContextManager:
        if precision == "float32":
            return torch.autocast(device, enabled=False)
        return cls(device, PRECISIONS[precision])
    return make


skips_when_on = _switched(SkipsWhenOn)
stale_region = _switched(StaleRegion)
shared_stack_region = _switched(SharedStackRegion)
clears_every_exit = _switched(ClearsEveryExit)
no_finally_decorator = _switched(NoFinallyDecorator)


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


def custom_fwd_cuda(fn: Callable) -> Callable:
    return torch.amp.custom_fwd(fn, device_type="cuda", cast_inputs=torch.float32)


def custom_bwd_cuda(fn: Callable) -> Callable:
    return torch.amp.custom_bwd(fn, device_type="cuda")


def _to_float32(t: torch.Tensor, float64: bool = False, detach: bool = False) -> Any:
    floating = t.is_floating_point() and t.device.type == DEVICE
    if not (floating if float64 else is_eligible(t, DEVICE)):  # float64: the bug
        return t
    return (t.detach() if detach else t).to(torch.float32)  # detach: the bug


def _caster(only_first: bool = False, disable: bool = True, always: bool = False,
            top_only: bool = False, float64: bool = False,
            detach: bool = False) -> Callable[[Callable], Callable]:
    """A custom_fwd of its own, with one optional bug per flag."""
    def cast(t: Any) -> Any:
        return _to_float32(t, float64, detach)

    def top(value: Any) -> Any:
        return cast(value) if isinstance(value, torch.Tensor) else value

    def decorate(fn: Callable) -> Callable:
        def forward(*args: Any, **kwargs: Any) -> Any:
            if not always and not torch.is_autocast_enabled(DEVICE):  # always: the bug
                return fn(*args, **kwargs)
            if only_first:  # the bug: the other inputs are left as they are
                args = (map_tensors(cast, args[0]), *args[1:])
            elif top_only:  # the bug: tensors inside containers are left as they are
                args, kwargs = tuple(map(top, args)), {k: top(v) for k, v in kwargs.items()}
            else:
                args, kwargs = map_tensors(cast, args), map_tensors(cast, kwargs)
            region = torch.autocast(DEVICE, enabled=False) if disable else contextlib.nullcontext()
            with region:
                return fn(*args, **kwargs)
        return forward
    return decorate


def disables_without_finally(fn: Callable) -> Callable:
    """Casts like custom_fwd but turns autocast off by hand, back on only when the forward
    returns: a forward that raises leaves the caller's region disabled."""
    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_autocast_enabled(DEVICE):
            return fn(*args, **kwargs)
        args, kwargs = map_tensors(_to_float32, args), map_tensors(_to_float32, kwargs)
        torch.set_autocast_enabled(DEVICE, False)
        out = fn(*args, **kwargs)  # the bug: no try/finally around it
        torch.set_autocast_enabled(DEVICE, True)
        return out
    return forward


first_arg_only = _caster(only_first=True)
autocast_on_inside = _caster(disable=False)
casts_outside = _caster(always=True)
top_level_only = _caster(top_only=True)
casts_float64 = _caster(float64=True)
detaches = _caster(detach=True)


def no_backward_state(fn: Callable) -> Callable:
    """custom_bwd's role, not done: backward runs in whatever state it is called in."""
    return fn


def region_decl(name: str, make: Callable, **extra: Any) -> RegionFactory:
    return RegionFactory(name=name, make=make, devices=(DEVICE,), precisions=PRECISIONS,
                         float32_names=("float32",), unknown=ERROR, decorator=True,
                         library="torch", version=torch.__version__, **extra)


def forward_decl(name: str, decorate: Callable, backward: Callable | None,
                 device: str = DEVICE) -> ForwardDecorator:
    return ForwardDecorator(name=name, decorate=decorate, cast_dtype=torch.float32,
                            casts_on=(device,), devices=(device,), decorate_backward=backward,
                            library="torch", version=torch.__version__)


def disabled(device: str) -> contextlib.AbstractContextManager:
    """The float32 island of PyTorch's docs: torch.autocast(device, enabled=False)."""
    return torch.autocast(device, enabled=False)


class _Island:
    """A hand-made island switching the state directly, with one bug each."""

    def __init__(self, device: str, bug: str):
        self.device, self.bug = device, bug

    def __enter__(self) -> None:
        self.prev = (torch.is_autocast_enabled(self.device), torch.get_autocast_dtype(self.device),
                     torch.is_autocast_cache_enabled())
        reads = self.device
        if self.bug == "reads_other":  # the bug: torch.is_autocast_enabled() without a
            reads = "cuda" if self.device != "cuda" else "cpu"  # device (CUDA's), or CPU's
        if torch.is_autocast_enabled(reads):
            torch.set_autocast_enabled(self.device, False)
        if self.bug == "cache_on":
            torch.set_autocast_cache_enabled(True)

    def __exit__(self, exc_type: Any, *rest: Any) -> bool:
        if self.bug == "no_restore":
            return False
        if not (self.bug == "no_restore_on_error" and exc_type is not None):
            torch.set_autocast_enabled(self.device, self.prev[0])
        if self.bug != "cache_on":
            torch.set_autocast_cache_enabled(self.prev[2])
        return False


def nests_by_cuda_flag(precision: str, device: str) -> contextlib.AbstractContextManager:
    """A region factory that enters nothing where autocast is already on, asking CUDA's
    flag (as ``torch.is_autocast_enabled()`` without a device does) whatever the device."""
    if torch.is_autocast_enabled("cuda"):
        return contextlib.nullcontext()
    return autocast_region(precision, device)


def island_of(bug: str) -> Callable[[str], contextlib.AbstractContextManager]:
    return lambda device: _Island(device, bug)


def back_to_float16(*inputs: torch.Tensor) -> torch.Tensor:
    """A function island that computes in float32 but casts its result to float16, whatever
    its input's dtype (declared returns="input")."""
    with torch.autocast(inputs[0].device.type, enabled=False):
        return float32_body(*inputs).to(torch.float16)


def leaves_through_other(*inputs: torch.Tensor) -> torch.Tensor:
    """A function island whose first call comes before it leaves autocast, and which then
    switches another device's autocast off beside its own (CUDA's on cpu, CPU's elsewhere)."""
    x, device = inputs[0].float(), inputs[0].device.type
    other = "cuda" if device != "cuda" else "cpu"
    with torch.autocast(other, enabled=False), torch.autocast(device, enabled=False):
        return float32_body(x).to(inputs[0].dtype)


def enters_region(*inputs: torch.Tensor) -> torch.Tensor:
    """A function island that enters its device's autocast (bfloat16) where it meant to
    leave it: without the device, torch.autocast("cuda") disables itself and hides it."""
    with torch.autocast(inputs[0].device.type, dtype=torch.bfloat16):
        return float32_body(*inputs).to(inputs[0].dtype)


def island_function(*inputs: torch.Tensor) -> torch.Tensor:
    with torch.autocast(inputs[0].device.type, enabled=False):
        return float32_body(*inputs).to(inputs[0].dtype)


def cuts_lower_precision(*inputs: torch.Tensor) -> torch.Tensor:
    """island_function with a fast path for lower-precision activations that forgets
    autograd: inside a region no gradient reaches its inputs."""
    out = island_function(*inputs)
    return out.detach() if inputs[0].dtype != torch.float32 else out


def run_in_region(body: Callable[[], Any], precision: str, device: str) -> Any:
    """torch.autocast as a runner: one model step whose forward is ``body``."""
    with autocast_region(precision, device):
        return body()


def run_in_cuda_region(body: Callable[[], Any], precision: str, device: str) -> Any:
    """A runner that enters CUDA's autocast whatever the device (its step's tensors)."""
    with torch.autocast("cuda", dtype=PRECISIONS[precision]):
        return body()


def runner_decl(name: str, runs: Callable) -> RegionRunner:
    return RegionRunner(name=name, runs=runs, devices=(DEVICE,), precisions=PRECISIONS,
                        library="torch", version=torch.__version__)


def island_decl(name: str, **how: Any) -> Float32Island:
    return Float32Island(name=name, devices=ISLAND_DEVICES, library="torch",
                         version=torch.__version__, **how)


#: an island needs no hardware: the planted ones run on cpu and on a fake cuda device
ISLAND_DEVICES = (DEVICE, "cuda")

REFERENCE = [region_decl("torch.autocast", autocast_region),
             forward_decl("torch.amp.custom_fwd", custom_fwd, custom_bwd),
             island_decl("torch.autocast-disabled", context=disabled),
             runner_decl("torch.autocast-runner", run_in_region)]

#: the implementations PLANTED delegates to; a mutant plants a broken one
SOUND = {"make": autocast_region, "decorate": custom_fwd, "decorate_backward": custom_bwd,
         "decorate_cuda": custom_fwd_cuda, "decorate_backward_cuda": custom_bwd_cuda,
         "island": disabled, "island_function": island_function, "runs": run_in_region}
_PLANTED: dict[str, Callable] = dict(SOUND)


def plant(**implementations: Callable) -> Callable[[], None]:
    """Plant broken implementations into PLANTED; returns the undo."""
    _PLANTED.update(implementations)
    return lambda: _PLANTED.update(SOUND)


PLANTED = [
    region_decl("planted.region", lambda p, d: _PLANTED["make"](p, d)),
    forward_decl("planted.forward", lambda fn: _PLANTED["decorate"](fn),
                 lambda fn: _PLANTED["decorate_backward"](fn)),
    island_decl("planted.island", context=lambda d: _PLANTED["island"](d)),
    island_decl("planted.island_function", returns="input",
                build=lambda d: lambda *x: _PLANTED["island_function"](*x),
                reference=float32_body),
    runner_decl("planted.runner", lambda body, p, d: _PLANTED["runs"](body, p, d)),
    # the same decorator on CUDA: its backward state checked on a fake cuda device
    forward_decl("planted.forward_cuda", lambda fn: _PLANTED["decorate_cuda"](fn),
                 lambda fn: _PLANTED["decorate_backward_cuda"](fn), device="cuda"),
    *planted_shapes.PLANTED,  # planted.swap, planted.predicate, planted.scaler
    *planted_islands.PLANTED,  # planted.island_region, island_before, island_arguments
]

LEAKS_DTYPE = region_decl("planted.leaks_dtype", leaky_region)
NEVER_CLEARS_CACHE = region_decl("planted.never_clears_cache", uncleared_region)
FIRST_ARG_ONLY = forward_decl("planted.first_arg_only", first_arg_only, None)
AUTOCAST_ON_INSIDE = forward_decl("planted.autocast_on_inside", autocast_on_inside, None)
BACKWARD_OUTSIDE = forward_decl("planted.backward_outside", custom_fwd, no_backward_state)
SKIPS_WHEN_ON = region_decl("planted.skips_when_on", skips_when_on)
STALE = region_decl("planted.stale", stale_region)
SHARED_STACK = region_decl("planted.shared_stack", shared_stack_region)
CLEARS_EVERY_EXIT = region_decl("planted.clears_every_exit", clears_every_exit)
NO_FINALLY_DECORATOR = region_decl("planted.no_finally_decorator", no_finally_decorator)
CASTS_OUTSIDE = forward_decl("planted.casts_outside", casts_outside, None)
TOP_LEVEL_ONLY = forward_decl("planted.top_level_only", top_level_only, None)
CASTS_FLOAT64 = forward_decl("planted.casts_float64", casts_float64, None)
DISABLES_WITHOUT_FINALLY = forward_decl("planted.disables_without_finally",
                                        disables_without_finally, None)
DETACHES = forward_decl("planted.detaches", detaches, None)
