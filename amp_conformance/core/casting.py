"""Autocast's eligibility rule and the hand casts the checks compare against."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


def is_eligible(t: torch.Tensor, device: str) -> bool:
    """Autocast's eligibility rule: floating point, not float64, on the autocast device."""
    return t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device


def widest_eligible(values: Any, device: str) -> torch.dtype | None:
    widest = None
    for t in tensors_in(values):
        if is_eligible(t, device):
            widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def promoted_floating(values: Any) -> torch.dtype | None:
    result = None
    for t in tensors_in(values):
        if t.is_floating_point() or t.is_complex():
            result = t.dtype if result is None else torch.promote_types(result, t.dtype)
    return result


def hand_cast(value: Any, dtype: torch.dtype, device: str) -> Any:
    """Cast eligible tensors as autocast would, inside any nesting of lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if is_eligible(value, device) else value
    if isinstance(value, (list, tuple)):
        return type(value)(hand_cast(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: hand_cast(v, dtype, device) for k, v in value.items()}
    return value


def output_dtypes(value: Any) -> list[torch.dtype]:
    return [t.dtype for t in tensors_in(value)]
