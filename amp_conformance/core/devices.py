"""What the suite needs to know about a device type: is it real here, which autocast
dtypes it supports, its Autocast dispatch key, its legacy entry point."""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.torch_version import TorchVersion

from amp_conformance.core.errors import describe_error

LOWER_DTYPES = (torch.bfloat16, torch.float16)


#: aten/src/ATen/mps/EmptyTensor.cpp (MPS_ERROR_DOUBLE_NOT_SUPPORTED, a TORCH_CHECK_TYPE)
MPS_NO_FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                  "support float64. Please use float32 instead.")


@dataclass(frozen=True)
class OpRefusal:
    """Inputs an op's kernel on the device refuses, with the error it raises there (from
    PyTorch's source for the device, in the releases ``since``/``until`` bound); the
    device's fake raises the same (``core.target``)."""

    op: str  #: the ATen overload that reaches the kernel, as torch.ops names it
    applies: Callable[[tuple, Mapping[str, Any]], bool]
    kind: type[Exception]
    message: str
    since: str | None = None
    until: str | None = None

    def in_release(self) -> bool:
        """Whether the running torch is within ``since``/``until``."""
        release = _release()
        return ((self.since is None or release >= self.since)
                and (self.until is None or release < self.until))

    def refused(self, op_name: str, args: tuple, kwargs: Mapping[str, Any]) -> bool:
        return op_name == self.op and bool(self.applies(args, kwargs))


@functools.cache
def _release() -> TorchVersion:
    """The running torch's release, its numeric part (``2.9.0`` of ``2.9.0a0+git``)."""
    return TorchVersion(re.match(r"[\d.]*\d", torch.__version__).group())


def _transposed_3d(dtypes: tuple[torch.dtype, ...] | None) -> Callable[[tuple, Mapping], bool]:
    """aten.convolution of a 5-D input, transposed (of one of ``dtypes``; None: any)."""
    def applies(args: tuple, kwargs: Mapping[str, Any]) -> bool:
        x = args[0]
        transposed = args[6] if len(args) > 6 else kwargs.get("transposed", False)
        return bool(transposed) and x.dim() == 5 and (dtypes is None or x.dtype in dtypes)
    return applies


#: aten/src/ATen/native/mps/operations/Convolution.mm, _mps_convolution_transpose: no 3-D
#: transposed convolution before 2.8 (pytorch#154696 added float32), none in float16 or
#: bfloat16 since (pytorch#160739)
MPS_OP_REFUSALS = (
    OpRefusal("aten.convolution.default", _transposed_3d(None), RuntimeError,
              "ConvTranspose 3D is not supported on MPS", until="2.8"),
    OpRefusal("aten.convolution.default", _transposed_3d(LOWER_DTYPES), RuntimeError,
              "ConvTranspose 3D with BF16 or FP16 types is not supported on MPS", since="2.8"),
)


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
    - ``rng``: the module holding the device's generator where there is no
      ``torch.<device>`` module (``get_rng_state()``, ``set_rng_state(seed)``): seeded
      draws and calls (``core.rng``).
    - ``atlas``: a column of the default atlas (``python -m amp_conformance atlas``,
      docs/atlas.md): torch itself ships the device's Autocast kernels, so its policy is
      shown on any machine, faked where the hardware is absent (``tools.atlas``).
    """

    name: str
    key_suffix: str
    legacy: str | None = None
    rejects_unsupported_dtype: bool = True
    fake_quirks: tuple[str, ...] = ()
    rng: str | None = None
    atlas: bool = False
    #: dtypes the device has no tensors of -> (the exception, its message) it raises making
    #: one; its fake raises the same (``core.target``)
    refuses: Mapping[torch.dtype, tuple[type[Exception], str]] = field(default_factory=dict)
    #: inputs some ops' kernels refuse on the device; its fake refuses the same
    refuses_ops: tuple[OpRefusal, ...] = ()


#: The device types torch.autocast knows by name (a PrivateUse1 backend adds its own).
PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (
    DeviceProfile("cpu", "CPU", legacy="cpu.amp.autocast", atlas=True),
    DeviceProfile("cuda", "CUDA", legacy="cuda.amp.autocast", rejects_unsupported_dtype=False,
                  fake_quirks=("cudnn_off",), atlas=True),
    DeviceProfile("xpu", "XPU", atlas=True),
    DeviceProfile("mps", "MPS", atlas=True, refuses={torch.float64: (TypeError, MPS_NO_FLOAT64)},
                  refuses_ops=MPS_OP_REFUSALS),
    DeviceProfile("mtia", "MTIA"),
    DeviceProfile("maia", "MAIA"),
    DeviceProfile("hpu", "HPU"),
    DeviceProfile("xla", "XLA", rng="torch_xla.core.xla_model"),
    DeviceProfile("ipu", "IPU"),
)}

#: The profile of a PrivateUse1 backend (renamed by its module): its own dispatch key.
PRIVATEUSE1 = DeviceProfile("privateuseone", "PrivateUse1")


#: device -> dtypes this run's declarations say it has no tensors of (capability float64)
_DECLARED_REFUSALS: dict[str, dict[torch.dtype, tuple[type[Exception], str]]] = {}


def declare_refusal(device: str, dtype: torch.dtype, message: str | None) -> None:
    """A dtype the vendor declares its device lacks: its fake refuses it with ``message``
    (None: the declaration withdrawn)."""
    declared = _DECLARED_REFUSALS.setdefault(device, {})
    if message is None:
        declared.pop(dtype, None)
    else:
        declared[dtype] = (TypeError, message)


def profile(device: str) -> DeviceProfile:
    """The device's profile (a PrivateUse1 backend, any other name, gets PRIVATEUSE1's),
    with the dtypes this run declares it lacks."""
    found = PROFILES.get(device) or replace(PRIVATEUSE1, name=device)
    declared = _DECLARED_REFUSALS.get(device)
    return replace(found, refuses={**declared, **found.refuses}) if declared else found


def atlas_devices() -> tuple[str, ...]:
    """The default atlas's devices, in PROFILES' order (cpu, cuda, xpu, mps)."""
    return tuple(p.name for p in PROFILES.values() if p.atlas)


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


@dataclass(frozen=True)
class Availability:
    """Whether a device is here, and how that was decided (the usage error quotes it)."""

    present: bool
    #: what was asked, and what it answered: ``torch.cuda.is_available() is false``
    how: str


#: A backend's own answer, set by a plugin hook (``pytest_amp_conformance_device_available``)
#: for the run: device type -> (present, what the backend said).
_DECLARED: dict[str, tuple[bool, str]] = {}


def declare_availability(device: str, present: bool | None, why: str = "") -> None:
    """Record the backend's own answer for ``device`` (None forgets it)."""
    if present is None:
        _DECLARED.pop(device, None)
    else:
        _DECLARED[device] = (bool(present), why)


def availability(device: str) -> Availability:
    """Is ``device`` here? Asked the way its backend answers, not assuming PyTorch's layout:

    1. the backend's own answer, where a hook gave one;
    2. ``torch.<device>.is_available()``, where that module exists (in-tree devices and
       PrivateUse1 backends that register a device module);
    3. otherwise a probe: a one-element tensor made on ``<device>:0`` (PyTorch/XLA has no
       ``torch.xla`` module; ``torch.empty(1, device="xla:0")`` is its answer).
    """
    if device == "cpu":
        return Availability(True, "cpu is always here")
    if device in _DECLARED:
        present, why = _DECLARED[device]
        return Availability(present, f"the backend's hook said {present}"
                            + (f" ({why})" if why else ""))
    check = getattr(device_module(device), "is_available", None)
    if check is not None:
        try:
            present = bool(check())
        except Exception as exc:  # noqa: BLE001 - a backend that cannot answer is not here
            return Availability(False, f"torch.{device}.is_available() raised "
                                       f"{describe_error(exc, 200)}")
        return Availability(present, f"torch.{device}.is_available() is {str(present).lower()}")
    if device in _PRESENT:
        return _PRESENT[device]
    found = _probe(device)
    if found.present:
        _PRESENT[device] = found
    return found


#: the probe's yes, kept for the process (the first probe may start the backend's runtime)
_PRESENT: dict[str, Availability] = {}


def _probe(device: str) -> Availability:
    from torch.utils._python_dispatch import _disable_current_modes

    tried = (f"torch.{device} has no is_available()" if device_module(device) is not None
             else f"there is no torch.{device} module")
    try:
        with _disable_current_modes():  # a fake tensor mode would answer for any device
            torch.empty(1, device=f"{device}:0")
    except Exception as exc:  # noqa: BLE001 - any refusal means: not here
        return Availability(False, f"{tried}, and torch.empty(1, device='{device}:0') raised "
                                   f"{describe_error(exc, 200)}")
    return Availability(True, f"{tried}; a tensor was made on '{device}:0'")


def is_available(device: str) -> bool:
    return availability(device).present


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
