"""Deliberately broken autocast implementations, to prove the suite catches them.

A mutant is applied for one run of the suite through the plugin module
``amp_conformance.mutant_plugin`` (``-p amp_conformance.mutant_plugin`` with the mutant's
name in the ``AMP_CONFORMANCE_MUTANT`` environment variable); ``apply()`` returns the
function that undoes it. Adding a mutant is one ``register(...)`` call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

Undo = Callable[[], None]


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    apply: Callable[[], Undo]
    #: text the failing test's message must contain (the broken op or property)
    expect: str
    #: pytest ``-k`` expression selecting the checks that must catch it
    select: str
    #: suite options the run needs (e.g. a fake device)
    options: tuple[str, ...] = ()


CATALOGUE: dict[str, Mutant] = {}


def register(mutant: Mutant) -> Mutant:
    if mutant.name in CATALOGUE:
        raise ValueError(f"mutant {mutant.name!r} registered twice")
    CATALOGUE[mutant.name] = mutant
    return mutant


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


def _exit_forgets_outer_dtype() -> Undo:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__exit__

    def broken_exit(self, *exc):
        result = original(self, *exc)
        torch.set_autocast_dtype(self.device, self.fast_dtype)  # the outer dtype is lost
        return result

    cls.__exit__ = broken_exit

    def undo() -> None:
        cls.__exit__ = original

    return undo


register(Mutant(
    name="mm-kept-fp32",
    description="AutocastCPU kernel of aten::mm runs without casting (stays float32)",
    apply=keep_dtype("mm"),
    expect="torch.mm",
    select="test_policy and torch_16-mm",
))
register(Mutant(
    name="exit-forgets-outer-dtype",
    description="torch.autocast.__exit__ leaves the inner region's dtype behind",
    apply=_exit_forgets_outer_dtype,
    expect="after the nested",
    select="test_other_dtype_subregion_restores_outer",
))
