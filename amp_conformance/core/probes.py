"""Instruments for the device-generic checks: count casts, probe what autocast does."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class CastCounter(TorchDispatchMode):
    """Counts the dtype conversions (``aten._to_copy``) autocast makes of one tensor.

    Autocast casts by calling ``Tensor.to``, which reaches the Python dispatch key
    below the Autocast keys, so the mode sees every cast, cached or not. A functionalized
    backend (PyTorch/XLA) unwraps its tensors before that key: the mode then sees the
    tensor the functional wrapper holds, so that one counts too.
    """

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        self.tensor = tensor
        self.casts: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args and self._is_ours(args[0]):
            self.casts.append(kwargs.get("dtype"))
        return func(*args, **kwargs)

    def _is_ours(self, arg: Any) -> bool:
        if arg is self.tensor:
            return True
        return (torch._is_functional_tensor(self.tensor)
                and arg is torch._from_functional_tensor(self.tensor))

    @property
    def count(self) -> int:
        return len(self.casts)


def probe(device: str, **tensor_kwargs: Any) -> torch.dtype:
    """The dtype torch.mm (lower precision in every registered policy) returns here."""
    a = torch.ones(4, 4, device=device, **tensor_kwargs)
    return torch.mm(a, a).dtype


def weight_and_input(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A float32 leaf that requires grad (a parameter) and an input for torch.mm."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(8, 8, generator=g).to(device).requires_grad_()
    x = torch.randn(8, 8, generator=g).to(device).requires_grad_()
    return w, x
