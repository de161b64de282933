"""What the suite needs to know about a device type: is it real here, which autocast
dtypes it supports, its Autocast dispatch key, its legacy entry point."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch

LOWER_DTYPES = (torch.bfloat16, torch.float16)

#: Device types torch.autocast knows by name (the PrivateUse1 backend adds its own).
_AUTOCAST_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "mtia", "maia", "hpu", "xla", "ipu")

_DISPATCH_KEY_SUFFIX = {
    "cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "mtia": "MTIA", "maia": "MAIA",
    "hpu": "HPU", "xla": "XLA", "ipu": "IPU",
}

#: Legacy device-specific entry points, deprecated (FutureWarning) since torch 2.4.
LEGACY_AUTOCAST: dict[str, Callable[[], Any]] = {
    "cpu": lambda: torch.cpu.amp.autocast,
    "cuda": lambda: torch.cuda.amp.autocast,
}


class DeviceError(ValueError):
    """An unknown or unusable device; the message says what is allowed."""


def privateuse1_name() -> str:
    return torch._C._get_privateuse1_backend_name()


def known_device_types() -> list[str]:
    names = list(_AUTOCAST_DEVICE_TYPES)
    custom = privateuse1_name()
    if custom not in names:
        names.append(custom)
    return names


def is_autocast_available(device: str) -> bool:
    try:
        return bool(torch.amp.is_autocast_available(device))
    except RuntimeError:
        return False


def validate(device: str) -> None:
    """Raise DeviceError unless ``device`` is a device type autocast knows."""
    if not isinstance(device, str) or ":" in device or not device:
        raise DeviceError(f"--device takes a device type such as 'cpu' or 'cuda', got {device!r}")
    if device not in known_device_types() or not is_autocast_available(device):
        allowed = [d for d in known_device_types() if is_autocast_available(d)]
        raise DeviceError(
            f"unknown autocast device type {device!r}; torch {torch.__version__} knows: "
            f"{', '.join(allowed)} (a PrivateUse1 backend appears here once its module is imported)"
        )


def device_module(device: str) -> Any:
    return getattr(torch, device, None)


def is_available(device: str) -> bool:
    if device == "cpu":
        return True
    module = device_module(device)
    check = getattr(module, "is_available", None)
    if check is None:
        return False
    try:
        return bool(check())
    except Exception:  # a backend that cannot even answer is not available
        return False


def dispatch_key(device: str) -> str:
    suffix = _DISPATCH_KEY_SUFFIX.get(device)
    return f"Autocast{suffix}" if suffix else "AutocastPrivateUse1"


def has_autocast_kernels(device: str) -> bool:
    """Whether the running torch registers any Autocast kernel for ``device``."""
    key = dispatch_key(device)
    with contextlib.suppress(RuntimeError):
        return any(
            torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
            for name in ("aten::mm", "aten::matmul", "aten::linear", "aten::conv2d")
        )
    return False


def supported_amp_dtypes(device: str, fake: bool = False) -> list[torch.dtype]:
    """The lower-precision dtypes the device's autocast accepts, as torch.autocast decides."""
    if fake:
        return list(LOWER_DTYPES)
    if device == "cuda":
        dtypes = [torch.float16]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if torch.cuda.is_bf16_supported():
                dtypes.insert(0, torch.bfloat16)
        return dtypes
    module = device_module(device)
    getter = getattr(module, "get_amp_supported_dtype", None)
    if getter is not None:
        return [d for d in getter() if d in LOWER_DTYPES]
    return list(LOWER_DTYPES)


def default_amp_dtype(device: str) -> torch.dtype:
    return torch.get_autocast_dtype(device)


def parse_dtype(name: str) -> torch.dtype:
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "float16": "float16",
               "bfloat16": "bfloat16"}
    key = aliases.get(name.removeprefix("torch."))
    if key is None:
        raise DeviceError(f"--amp-dtype {name!r} is not a lower-precision dtype; allowed: "
                          "bfloat16 (bf16), float16 (fp16, half)")
    return getattr(torch, key)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
