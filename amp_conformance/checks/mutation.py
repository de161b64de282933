"""The mutation machinery: what a mutant is, the catalogue it registers in, and the helpers
that break autocast (deliberately broken implementations, to prove the suite catches them).

A mutant is applied for one run of the suite through the plugin module
``amp_conformance.plugin.mutant`` (``-p amp_conformance.plugin.mutant`` with the mutant's
name in the ``AMP_CONFORMANCE_MUTANT`` environment variable); ``apply()`` returns the
function that undoes it. ``python -m amp_conformance selftest`` runs the whole catalogue,
each mutant in its own process (see :mod:`amp_conformance.tools.selftest.runner`).

The mutants themselves live beside the checks that must kill them, in
``checks/<family>/mutants.py``, gathered by :func:`amp_conformance.checks.registry.mutants`.
Adding a mutant is one ``register(Mutant(...))`` call in its family's module: what it breaks (``apply``), the
checks that must catch it (``select``, a ``-k`` expression kept narrow so the campaign
stays fast) and the words the failure message must contain (``expect``: the broken op or
property, found in the failure's ``E`` lines, not merely in the test id).

Kinds of breakage, and the helpers that make them:

* an ``Autocast<Device>`` kernel replaced from Python (:func:`override_kernel`):
  :func:`keep_dtype` (casts nothing), :func:`cast_kernel` (casts to the wrong dtype, or
  casts ineligible tensors too, or perturbs the result), :func:`python_cast_cache` (a
  cast cache of the kernel's own, with a caching bug);
* ``torch.autocast`` (``__init__``/``__enter__``/``__exit__``/``__call__``), the cache
  functions, the legacy entry points and ``torch.amp.custom_fwd``/``custom_bwd`` patched
  in Python (:func:`patch`).
"""


from __future__ import annotations

import functools
import itertools
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import torch

from amp_conformance.core import devices
from amp_conformance.core.casting import is_eligible, map_tensors, tensors_in

Undo = Callable[[], None]

@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    apply: Callable[[], Undo]
    #: text the failing test's message must contain (the broken op or property); a tuple
    #: means every one of them
    expect: Union[str, tuple[str, ...]]
    #: pytest ``-k`` expression selecting the checks that must catch it
    select: str
    #: further suite options the run needs
    options: tuple[str, ...] = ()
    #: the device type whose suite runs against the mutant
    device: str = "cpu"
    #: whether that suite runs with ``--fake`` (the device's policy without the device)
    fake: bool = False
    #: a known hole in the suite: why it cannot catch this mutant yet. The campaign still
    #: runs it and reports it by name, but a survivor with a gap does not fail the campaign
    #: (``--strict`` makes it); a gap mutant that gets killed is reported as closed.
    gap: str | None = None
    #: the check family whose checks must kill it (its module's folder, set when found)
    family: str = ""

    @property
    def expected_texts(self) -> tuple[str, ...]:
        return (self.expect,) if isinstance(self.expect, str) else tuple(self.expect)

    @property
    def tier(self) -> str:
        return f"{self.device} (fake)" if self.fake else self.device

    def suite_options(self) -> list[str]:
        """The suite's options for this mutant's run, ``-k`` excluded."""
        return ["--device", self.device, *(["--fake"] if self.fake else []), *self.options]


CATALOGUE: dict[str, Mutant] = {}


def register(mutant: Mutant) -> Mutant:
    if mutant.name in CATALOGUE:
        raise ValueError(f"mutant {mutant.name!r} registered twice")
    CATALOGUE[mutant.name] = mutant
    return mutant


# -- kernels -------------------------------------------------------------------------


def override_kernel(op: str, dispatch_key: str, kernel_factory: Callable[[Callable], Callable]) -> Undo:
    """Replace the ``dispatch_key`` kernel of ``aten::op`` by ``kernel_factory(redispatch)``.

    ``redispatch`` calls the op below the Autocast key, as the real kernel would after
    casting. The returned function destroys the library, restoring the original kernel.
    """
    name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, name)
    target = getattr(packet, overload or "default")
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, dispatch_key))

    def redispatch(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(keyset):
            return target(*args, **kwargs)

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Warning only once for all operators")
        lib.impl(op, kernel_factory(redispatch), dispatch_key)
    return lib._destroy


def keep_dtype(op: str, dispatch_key: str = "AutocastCPU") -> Callable[[], Undo]:
    """A lower-precision op whose autocast kernel casts nothing (runs in float32)."""
    return lambda: override_kernel(op, dispatch_key, lambda redispatch: redispatch)


def no_kernel(op: str, dispatch_key: str = "AutocastCPU") -> Callable[[], Undo]:
    """A backend with no autocast kernel at all for ``op``: a fallthrough at the key."""
    def apply() -> Undo:
        library = torch.library.Library("aten", "IMPL")
        library.impl(op, torch.library.fallthrough_kernel, dispatch_key)
        return library._destroy
    return apply


def _cast_all(value: Any, dtype: torch.dtype, should_cast: Callable[[torch.Tensor], bool]) -> Any:
    return map_tensors(lambda t: t.to(dtype) if should_cast(t) else t, value)


#: What a kernel casts to, given the device's autocast dtype and the call's tensors.
AMP = "amp"          # the autocast dtype
FP32 = "float32"
NARROWEST = "narrowest"  # the narrowest eligible floating type (promote done backwards)


def _target_dtype(to: str, device: str, tensors: list[torch.Tensor]) -> torch.dtype | None:
    if to == AMP:
        return torch.get_autocast_dtype(device)
    if to == FP32:
        return torch.float32
    if to == NARROWEST:
        sizes = [t.dtype for t in tensors if is_eligible(t, device)]
        return min(sizes, key=lambda d: torch.finfo(d).bits) if sizes else None
    raise ValueError(to)


def one_ulp_up(out: Any) -> Any:
    """Every floating (or complex) element of the output moved by one ulp toward +inf."""
    if isinstance(out, (list, tuple)):
        return type(out)(one_ulp_up(o) for o in out)
    if not isinstance(out, torch.Tensor):
        return out
    if out.is_complex():
        real = torch.view_as_real(out)
        return torch.view_as_complex(torch.nextafter(real, torch.full_like(real, float("inf"))))
    if out.is_floating_point():
        return torch.nextafter(out, torch.full_like(out, float("inf")))
    return out


def cast_kernel(
    op: str,
    to: str,
    dispatch_key: str = "AutocastCPU",
    *,
    also: Callable[[torch.Tensor], bool] = lambda t: False,
    output: Callable[[Any], Any] | None = None,
    drop_kwargs: tuple[str, ...] = (),
    force_kwargs: dict[str, Any] | None = None,
) -> Callable[[], Undo]:
    """An autocast kernel that casts eligible inputs to ``to`` (``AMP``, ``FP32`` or
    ``NARROWEST``), and the tensors ``also`` accepts besides; ``output`` post-processes
    the result; ``drop_kwargs``/``force_kwargs`` edit the call's keyword arguments."""
    device = devices.device_of_dispatch_key(dispatch_key)

    def factory(redispatch: Callable) -> Callable:
        def kernel(*args, **kwargs):
            dtype = _target_dtype(to, device, list(tensors_in((args, kwargs))))
            if dtype is not None:
                def should(t):
                    return is_eligible(t, device) or also(t)
                args = _cast_all(args, dtype, should)
                kwargs = _cast_all(kwargs, dtype, should)
            kwargs = {k: v for k, v in kwargs.items() if k not in drop_kwargs}
            kwargs.update(force_kwargs or {})
            out = redispatch(*args, **kwargs)
            return output(out) if output is not None else out
        return kernel

    return lambda: override_kernel(op, dispatch_key, factory)


def _to_amp(out: Any, device: str = "cpu") -> Any:
    dtype = torch.get_autocast_dtype(device)
    if isinstance(out, (list, tuple)):
        return type(out)(_to_amp(o, device) for o in out)
    return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


# -- Python-level patches ------------------------------------------------------------


def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> Callable[[], Undo]:
    """Replace ``owner.name`` by ``make(original)``; undo puts the original back."""
    def apply() -> Undo:
        had = name in vars(owner) if isinstance(owner, type) else True
        original = vars(owner)[name] if isinstance(owner, type) and had else getattr(owner, name)
        setattr(owner, name, make(getattr(owner, name)))

        def undo() -> None:
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        return undo
    return apply


def patches(*applies: Callable[[], Undo]) -> Callable[[], Undo]:
    """Several patches applied together, undone in reverse."""
    def apply() -> Undo:
        undos = [a() for a in applies]

        def undo() -> None:
            for u in reversed(undos):
                u()
        return undo
    return apply


_AUTOCAST = torch.amp.autocast_mode.autocast


def _wrap_method(after: Callable[..., Any] | None = None,
                 before: Callable[..., Any] | None = None) -> Callable[[Any], Any]:
    """``make`` for :func:`patch`: run ``before(self, *a, **k)`` / ``after(self, result,
    *a, **k)`` around the original method."""
    def make(original):
        @functools.wraps(original)
        def method(self, *args, **kwargs):
            if before is not None:
                before(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            if after is not None:
                after(self, *args, **kwargs)
            return result
        return method
    return make


def fake_mutant(name: str, description: str, apply: Callable[[], Undo], expect, select: str,
                device: str = "cuda") -> Mutant:
    """Register a mutant of the fake tier: ``device``'s policy without the device (``--fake``)."""
    return register(Mutant(name=name, description=description, apply=apply, expect=expect,
                           select=select, device=device, fake=True))


def python_cast_cache(*, under_no_grad: bool = False, non_leaf: bool = False) -> Callable[[], Undo]:
    """The mm kernel with a cast cache of its own, as a backend without PyTorch's C++ cache
    would write it, with one of two bugs: it also caches casts made under no_grad (they
    have no autograd history: pytorch#158232), or it also caches non-leaf tensors."""
    def apply() -> Undo:
        cache: dict[tuple[int, torch.dtype], torch.Tensor] = {}

        def cached(t: torch.Tensor) -> torch.Tensor:
            if not is_eligible(t, "cpu"):
                return t
            dtype = torch.get_autocast_dtype("cpu")
            cacheable = torch.is_autocast_cache_enabled() and t.requires_grad \
                and (t.is_leaf or non_leaf) and (torch.is_grad_enabled() or under_no_grad)
            if not cacheable:
                return t.to(dtype)
            key = (id(t), dtype)
            if key not in cache:
                cache[key] = t.to(dtype)
            return cache[key]

        def factory(redispatch):
            return lambda a, b: redispatch(cached(a), cached(b))

        undo_kernel = override_kernel("mm", "AutocastCPU", factory)
        original_clear = torch.clear_autocast_cache

        def clear() -> None:
            cache.clear()
            original_clear()

        torch.clear_autocast_cache = clear

        def undo() -> None:
            torch.clear_autocast_cache = original_clear
            undo_kernel()
        return undo
    return apply


def python_mm_cache(*, per_thread_clear: bool = False, inference: bool = False,
                     recache_no_grad: bool = False) -> Callable[[], Undo]:
    """The cpu mm autocast kernel with a global cast cache of its own (as a backend
    without PyTorch's C++ cache would write one), with one bug: clearing drops only the
    clearing thread's entries, or casts made under inference_mode are cached, or every
    no_grad cast is cached under a new key (re-caching the same parameter)."""
    def apply() -> Undo:
        cache: dict[tuple, tuple[int, torch.Tensor]] = {}
        fresh = itertools.count()

        def cached(t: torch.Tensor) -> torch.Tensor:
            if not is_eligible(t, "cpu"):
                return t
            dtype = torch.get_autocast_dtype("cpu")
            if not (torch.is_autocast_cache_enabled() and t.requires_grad and t.is_leaf) or \
                    (torch.is_inference_mode_enabled() and not inference):
                return t.to(dtype)
            key: tuple = (id(t), dtype)
            if recache_no_grad and not torch.is_grad_enabled():
                key += (next(fresh),)
            if key not in cache:
                with torch.enable_grad():
                    cache[key] = (threading.get_ident(), t.to(dtype))
            return cache[key][1]

        undo_kernel = override_kernel(
            "mm", "AutocastCPU", lambda redispatch: lambda a, b: redispatch(cached(a), cached(b)))
        original_clear = torch.clear_autocast_cache

        def clear() -> None:
            me = threading.get_ident()
            for key in [k for k, (owner, _) in cache.items()
                        if not per_thread_clear or owner == me]:
                cache.pop(key, None)
            original_clear()

        torch.clear_autocast_cache = clear

        def undo() -> None:
            torch.clear_autocast_cache = original_clear
            undo_kernel()
        return undo
    return apply

