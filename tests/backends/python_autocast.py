"""An autocast policy registered from Python under ``AutocastPrivateUse1``, as the test
backends of Python modes register theirs (``amp_pymode``, ``amp_npmode``): each op of the
policy casts its floating inputs of the device to the autocast dtype (``lower``), to
float32 (``fp32``) or to the widest of them (``promote``), below the autocast key."""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet
from torch.utils._pytree import tree_leaves

_BELOW = DispatchKeySet(DispatchKey.AutocastPrivateUse1)


def _cast(value: Any, dtype: torch.dtype, device: str) -> Any:
    if (isinstance(value, torch.Tensor) and value.is_floating_point()
            and value.dtype != torch.float64 and value.device.type == device):
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, device) for v in value)
    return value


def _widest(values: Any, lower: torch.dtype, device: str) -> torch.dtype:
    leaves = [v for v in tree_leaves(values) if isinstance(v, torch.Tensor)
              and v.is_floating_point() and v.device.type == device]
    return torch.float32 if any(v.dtype == torch.float32 for v in leaves) else lower


def _kernel(op: torch._ops.OpOverloadPacket, rule: str, device: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        lower = torch.get_autocast_dtype(device)
        dtype = ({"lower": lower, "fp32": torch.float32}.get(rule)
                 or _widest((args, kwargs), lower, device))
        with torch._C._ExcludeDispatchKeyGuard(_BELOW):
            return op(*_cast(args, dtype, device), **_cast(kwargs, dtype, device))
    return run


def register_policy(device: str, policy: dict[str, str]) -> list[torch.library.Library]:
    """A fallthrough for every other op and ``policy``'s kernels (op -> rule); the
    libraries, which must be kept alive."""
    through = torch.library.Library("_", "IMPL")
    through.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    for name, rule in policy.items():
        kernels.impl(name, _kernel(getattr(torch.ops.aten, name), rule, device),
                     "AutocastPrivateUse1")
    return [through, kernels]
