"""Autocast's eligibility rule and the hand casts the checks compare against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map


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
    """Autocast's eligibility rule: floating point, not float64, on the autocast device."""
    return t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device


def promote(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """``torch.promote_types``, outside every torch function mode: the suite's own dtype
    arithmetic, which a backend's mode (one that cannot lower it) never sees."""
    with torch._C.DisableTorchFunction():
        return torch.promote_types(a, b)


def widest_eligible(values: Any, device: str) -> torch.dtype | None:
    widest = None
    for t in tensors_in(values):
        if is_eligible(t, device):
            widest = t.dtype if widest is None else promote(widest, t.dtype)
    return widest


def promoted_floating(values: Any) -> torch.dtype | None:
    result = None
    for t in tensors_in(values):
        if t.is_floating_point() or t.is_complex():
            result = t.dtype if result is None else promote(result, t.dtype)
    return result


def hand_cast(value: Any, dtype: torch.dtype, device: str) -> Any:
    """Cast eligible tensors as autocast would, inside any nesting of containers."""
    return map_tensors(lambda t: t.to(dtype) if is_eligible(t, device) else t, value)


def output_dtypes(value: Any) -> list[torch.dtype]:
    return [t.dtype for t in tensors_in(value)]
