"""Autocast's eligibility rule and the hand casts the checks compare against."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from amp_conformance.core.modes import outside_modes


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside any nesting of lists, tuples, dicts and torch.return_types."""
    return (leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor))


def map_tensors(fn: Callable[[torch.Tensor], Any], value: Any) -> Any:
    """``value`` with every tensor inside replaced by ``fn(tensor)``; other leaves kept as
    the very same objects."""
    return tree_map(lambda leaf: fn(leaf) if isinstance(leaf, torch.Tensor) else leaf, value)


def settle(value: Any) -> Any:
    """``value``, with every tensor of it on a device (not cpu, meta or fake) read back once,
    so that a lazy backend (PyTorch/XLA) computes it now: an error it defers until the graph
    runs is then raised by the call that caused it, where an eager device raises it."""
    from torch._subclasses.fake_tensor import FakeTensor

    for t in tensors_in(value):
        if t.device.type not in ("cpu", "meta") and not isinstance(t, FakeTensor):
            t.detach().cpu()
    return value


def is_eligible(t: torch.Tensor, device: str) -> bool:
    """Autocast's eligibility rule: floating point, not float64, on the autocast device
    (read past a backend's torch function mode: the suite's own question)."""
    with torch._C.DisableTorchFunction():
        return t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device


#: the dtypes of PyTorch's promotion lattice (:func:`promote`)
LATTICE_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                  torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32,
                  torch.complex64, torch.complex128)


@functools.cache
def _lattice() -> dict[tuple[torch.dtype, torch.dtype], torch.dtype]:
    """PyTorch's promotion lattice as data, read once outside every user mode."""
    with outside_modes():
        return {(a, b): torch.promote_types(a, b) for a in LATTICE_DTYPES for b in LATTICE_DTYPES}


def promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """``torch.promote_types`` as data: the suite's own dtype arithmetic never meets a
    backend's modes (a dispatch mode sees ``aten::promote_types`` and may not lower it)."""
    found = _lattice().get((a, b))
    if found is not None:
        return found
    with outside_modes():  # a dtype beyond the lattice (float8, …): PyTorch says
        return torch.promote_types(a, b)


def widest_eligible(values: Any, device: str) -> torch.dtype | None:
    widest = None
    with torch._C.DisableTorchFunction():
        for t in tensors_in(values):
            if is_eligible(t, device):
                widest = t.dtype if widest is None else promote(widest, t.dtype)
    return widest


def promoted_floating(values: Any) -> torch.dtype | None:
    result = None
    with torch._C.DisableTorchFunction():
        for t in tensors_in(values):
            if t.is_floating_point() or t.is_complex():
                result = t.dtype if result is None else promote(result, t.dtype)
    return result


def hand_cast(value: Any, dtype: torch.dtype, device: str) -> Any:
    """Cast eligible tensors as autocast would, inside any nesting of containers."""
    return map_tensors(lambda t: t.to(dtype) if is_eligible(t, device) else t, value)


def output_dtypes(value: Any) -> list[torch.dtype]:
    return [t.dtype for t in tensors_in(value)]
