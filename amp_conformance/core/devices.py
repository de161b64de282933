"""What the suite needs to know about a device type: is it real here, which autocast
dtypes it supports, its Autocast dispatch key, its legacy entry point."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

LOWER_DTYPES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class DeviceProfile:
    """What the suite knows about one in-tree autocast device type; one row per device.

    - ``key_suffix``: the Autocast dispatch key is ``Autocast<key_suffix>`` (coverage,
      kernel overrides of the selftest, fake mode).
    - ``legacy``: the deprecated ``torch.<device>.amp.autocast`` entry point, as a dotted
      path under ``torch`` (the legacy check; None: the device has none).
    - ``rejects_unsupported_dtype``: ``torch.autocast`` warns and disables autocast for a
      dtype the device does not support (the region state machine); cuda instead raises
      only for bfloat16 where the GPU lacks it.
    - ``fake_quirks``: contexts entered around FakeTensorMode where the hardware is absent
      (``core.target``), e.g. cuDNN off so a CUDA build takes the portable path.
    """

    name: str
    key_suffix: str
    legacy: str | None = None
    rejects_unsupported_dtype: bool = True
    fake_quirks: tuple[str, ...] = ()


#: The device types torch.autocast knows by name (a PrivateUse1 backend adds its own).
PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (
    DeviceProfile("cpu", "CPU", legacy="cpu.amp.autocast"),
    DeviceProfile("cuda", "CUDA", legacy="cuda.amp.autocast", rejects_unsupported_dtype=False,
                  fake_quirks=("cudnn_off",)),
    DeviceProfile("xpu", "XPU"),
    DeviceProfile("mps", "MPS"),
    DeviceProfile("mtia", "MTIA"),
    DeviceProfile("maia", "MAIA"),
    DeviceProfile("hpu", "HPU"),
    DeviceProfile("xla", "XLA"),
    DeviceProfile("ipu", "IPU"),
)}

#: The profile of a PrivateUse1 backend (renamed by its module): its own dispatch key.
PRIVATEUSE1 = DeviceProfile("privateuseone", "PrivateUse1")


def profile(device: str) -> DeviceProfile:
    """The device's profile; a PrivateUse1 backend (any other name) gets PRIVATEUSE1's."""
    return PROFILES.get(device) or replace(PRIVATEUSE1, name=device)


def device_of_dispatch_key(key: str) -> str:
    """``AutocastCUDA`` -> ``cuda`` (the PrivateUse1 key -> the backend's current name)."""
    for p in PROFILES.values():
        if f"Autocast{p.key_suffix}" == key:
            return p.name
    if key == f"Autocast{PRIVATEUSE1.key_suffix}":
        return privateuse1_name()
    raise KeyError(f"{key!r} is no Autocast dispatch key")


def legacy_autocast(device: str) -> Callable[..., Any] | None:
    """The deprecated torch.<device>.amp.autocast class, or None where there is none."""
    path = profile(device).legacy
    if path is None:
        return None
    obj: Any = torch
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


class DeviceError(ValueError):
    """An unknown or unusable device; the message says what is allowed."""


def privateuse1_name() -> str:
    return torch._C._get_privateuse1_backend_name()


def known_device_types() -> list[str]:
    names = list(PROFILES)
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
            f"{', '.join(allowed)} (a PrivateUse1 backend appears here once its module is "
            "imported: pass --backend-module MODULE)"
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
    return f"Autocast{profile(device).key_suffix}"


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
