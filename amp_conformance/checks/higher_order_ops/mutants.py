"""Mutants of the higher_order_ops family: a HOP that loses its autocast rule eagerly, one
whose subgraphs run outside the region, one whose compiled trace drops the region."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey

from amp_conformance.checks.mutation import Mutant, Undo, register


def _hop_kernel(hop: Callable[[], Any], key: Any, table: str,
                make: Callable[[Callable], Callable]) -> Callable[[], Undo]:
    """The HOP's kernel for ``key`` (a dispatch key in ``py_kernels``, or a mode class in
    ``python_key_table``) replaced by ``make(original)``; its dispatch cache cleared both
    ways."""
    def apply() -> Undo:
        op = hop()
        kernels = getattr(op, table)
        original = kernels[key]
        kernels[key] = make(original)
        op._dispatch_cache.clear()

        def undo() -> None:
            kernels[key] = original
            op._dispatch_cache.clear()
        return undo
    return apply


def _outside_cpu_autocast(kernel: Callable) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast("cpu", enabled=False):
            return kernel(*args, **kwargs)
    return run


def _casts_nothing(kernel: Callable) -> Callable:
    """flex_attention's autocast rule, keeping the inputs as they came."""
    def run(*args: Any, **kwargs: Any) -> Any:
        from torch._higher_order_ops.flex_attention import flex_attention

        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.AutocastCPU)):
            return flex_attention(*args, **kwargs)
    return run


def _flex() -> Any:
    from torch._higher_order_ops.flex_attention import flex_attention
    return flex_attention


def _cond() -> Any:
    from torch._higher_order_ops.cond import cond_op
    return cond_op


def _proxy_mode() -> type:
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
    return ProxyTorchDispatchMode


register(Mutant(
    name="hop-flex_attention-loses-cpu-rule",
    description="flex_attention's AutocastCPU rule casts nothing: query, key and value stay "
                "float32 inside a cpu region",
    apply=_hop_kernel(_flex, DispatchKey.AutocastCPU, "py_kernels", _casts_nothing),
    expect=("higher-order op flex_attention", "uncompiled", "output dtypes and shapes"),
    select="test_higher_order_op and cpu-uncompiled-flex_attention",
))

register(Mutant(
    name="hop-cond-branches-outside-autocast",
    description="torch.cond runs its branch eagerly with cpu autocast off",
    apply=_hop_kernel(_cond, DispatchKey.CompositeExplicitAutograd, "py_kernels",
                      _outside_cpu_autocast),
    expect=("higher-order op cond (torch.cond), uncompiled", "output dtypes and shapes"),
    select="test_higher_order_op and cpu-uncompiled-cond",
))


def _traced_outside(kernel: Callable) -> Callable:
    def run(mode: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast("cpu", enabled=False):
            return kernel(mode, *args, **kwargs)
    return run


register(Mutant(
    name="hop-cond-compiled-drops-region",
    description="AOTAutograd traces torch.cond's branches with cpu autocast off: the "
                "compiled cond computes in float32, the uncompiled one as it should",
    apply=lambda: _hop_kernel(_cond, _proxy_mode(), "python_key_table", _traced_outside)(),
    expect=("higher-order op cond (torch.cond), compiled with aot_eager",
            "output dtypes and shapes"),
    select="test_higher_order_op and cpu-aot_eager-cond",
))
