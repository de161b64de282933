"""fakegpu's autocast policy, registered from Python under ``AutocastPrivateUse1``.

torch registers nothing for AutocastPrivateUse1 (no fallback either), so a PrivateUse1
backend registers a fallthrough for every op and its own kernel for each op of its
policy. The kernels do what ``aten/src/ATen/autocast_mode.h`` does for CUDA — cast the
eligible arguments (floating, not float64, on this device), then call the op below the
autocast key — but they cannot use ``cached_cast``: there is no Python binding for the
cast cache, so this device declares no cast cache (capabilities.toml).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from .device import NAME

KEY = "AutocastPrivateUse1"
_BELOW = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

#: op overload -> cast policy (the names of autocast_mode.h)
POLICY: dict[str, str] = {
    # lower_precision_fp
    "mm": "lower_precision_fp",
    "bmm": "lower_precision_fp",
    "addmm": "lower_precision_fp",
    "baddbmm": "lower_precision_fp",
    "linear": "lower_precision_fp",
    "conv1d": "lower_precision_fp",
    # conv2d: not yet (the example's expected failure, see xfail.txt)
    # fp32
    "exp": "fp32",
    "log": "fp32",
    "mse_loss": "fp32",
    "layer_norm": "fp32",
    # fp32_set_opt_dtype
    "softmax.int": "fp32_set_opt_dtype",
    "log_softmax.int": "fp32_set_opt_dtype",
    # promote
    "cat": "promote",
    "stack": "promote",
    "addcmul": "promote",
}

_libraries: list[torch.library.Library] = []


def is_eligible(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64
            and x.device.type == NAME)


def cast(value: Any, dtype: torch.dtype) -> Any:
    if is_eligible(value):
        return value if value.dtype == dtype else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, dtype) for v in value)
    return value


def _eligible_tensors(value: Any):
    if is_eligible(value):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _eligible_tensors(v)


def promote_type(lower: torch.dtype, values: Any) -> torch.dtype:
    """autocast_mode.h's ``prioritize``: float32 wins over the autocast dtype; an eligible
    tensor of another lower-precision dtype is an error, as in torch."""
    current = lower
    for t in _eligible_tensors(values):
        if t.dtype == torch.float32 or current == torch.float32:
            current = torch.float32
        elif t.dtype != lower:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _op(name: str) -> torch._ops.OpOverload:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def kernel(op: torch._ops.OpOverload, policy: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_BELOW):
            if policy == "lower_precision_fp":
                dtype = torch.get_autocast_dtype(NAME)
                return op(*cast(args, dtype), **cast(kwargs, dtype))
            if policy == "fp32":
                return op(*cast(args, torch.float32), **cast(kwargs, torch.float32))
            if policy == "fp32_set_opt_dtype":
                if is_eligible(args[0]) and kwargs.get("dtype", args[2] if len(args) > 2 else None) is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
                    args = args[:2]
                return op(*args, **kwargs)
            if policy == "promote":
                widest = promote_type(torch.get_autocast_dtype(NAME), (args, kwargs))
                return op(*cast(args, widest), **cast(kwargs, widest))
            raise AssertionError(f"unknown policy {policy}")

    run.__name__ = f"autocast_{op._schema.name.split('::')[-1]}_{policy}"
    return run


def register(drop: list[str] | tuple[str, ...] = ()) -> torch.library.Library:
    """Register the policy (every op of POLICY whose base name is not in ``drop``)."""
    unknown = set(drop) - {n.split(".")[0] for n in POLICY}
    if unknown:
        raise ValueError(f"FAKEGPU_DROP_AUTOCAST: no such op in the policy: {sorted(unknown)}")
    if not _libraries:
        fallthrough = torch.library.Library("_", "IMPL")
        fallthrough.fallback(torch.library.fallthrough_kernel, KEY)
        _libraries.append(fallthrough)
    lib = torch.library.Library("aten", "IMPL")
    for name, policy in POLICY.items():
        if name.split(".")[0] not in drop:
            lib.impl(name, kernel(_op(name), policy), KEY)
    _libraries.append(lib)
    return lib


def unregister() -> None:
    """Remove the per-op kernels and the fallthrough (the device stays registered)."""
    while _libraries:
        _libraries.pop()._destroy()
