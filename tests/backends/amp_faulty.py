"""The example fakegpu backend with faults of the kind that look excusable, as an
adversarial vendor would ship them (``AMP_FAULT=<name>[,<name>]``).

Each fault is wrong autocast dressed as something the suite names instead of failing: a
kernel the device lacks, the backend's own words naming another op, a limit its probe
shows, a transform's own departure, a tensor that cannot be printed. Without autocast the
device runs every call the suite makes, so no excuse may hold: every fault must fail its
items and the run (``tests/test_excuses.py``). Imported with ``--backend-module
amp_faulty`` (``examples/fakegpu`` and this folder on the path):

- ``lowering``: mm's autocast kernel calls ``amp_faulty::fused_gemm``, an op of the
  backend's own library with no kernel on the device (the dispatcher's own "Could not run
  'amp_faulty::fused_gemm' with arguments from the 'PrivateUse1' backend");
- ``own_words``: mm's autocast kernel raises the backend's own exception class, naming
  ``aten::_to_copy``;
- ``mul_raises``: an autocast kernel for ``mul.Tensor``, an op the reference leaves alone,
  that raises (in the backend's words, naming it);
- ``detach``: the lower-precision casts detach (no gradient reaches the inputs under
  autocast), and the device's mm refuses a one-column first operand, which the limits'
  probe (a ``Linear(2, 2)``'s weight gradient) meets outside autocast;
- ``vmap_bmm``: bmm has no autocast kernel (under ``vmap``, mm and matmul batch to bmm
  and give float32), and the device's bmm rounds otherwise than its mm without autocast;
- ``abs_half``: the device's ``abs`` runs in float32 only (printing a float16 tensor
  calls it), and mm's autocast kernel is a little off, so items fail and build messages.

And faults of state, which a proof that reruns in what the failure left would excuse:

- ``error_state``: mm's autocast kernel makes an illegal memory access on an 8x8 operand,
  and, as a real accelerator does, the device stays in that error state until it is
  synchronized (which raises it once): every later kernel raises it, naming itself (the
  item's read-back, ``aten::_to_copy``, a tool kernel the device seems to lack);
- ``error_twice``: the same, the error state surviving the first synchronize;
- ``error_sticky``: the same, the device never coming back;
- ``grad_leak``: the autocast casts turn grad mode off and never back on;
- ``late_error``: mm's autocast kernel gives right values on an 8x8 operand, but the
  device reports an error for it at the next synchronize, as an asynchronous device does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

FAULTS = ("lowering", "own_words", "mul_raises", "detach", "vmap_bmm", "abs_half",
          "error_state", "error_twice", "error_sticky", "grad_leak", "late_error")
#: the faults of an error state: how many synchronizes it survives
_STATE = {"error_state": 0, "error_twice": 1, "error_sticky": 10 ** 9}
CHOSEN = [f for f in os.environ.get("AMP_FAULT", "").split(",") if f]
unknown = sorted(set(CHOSEN) - set(FAULTS))
if unknown:
    raise ValueError(f"AMP_FAULT: no such fault {unknown}; the faults: {', '.join(FAULTS)}")

_DROP = {"lowering": "mm", "own_words": "mm", "vmap_bmm": "bmm", "abs_half": "mm",
         "error_state": "mm", "error_twice": "mm", "error_sticky": "mm", "late_error": "mm"}
# an error state reaches every kernel: the device's fallback looks its kernel up per call
_NO_KERNEL = {"lowering": "fused_gemm", **dict.fromkeys([*_STATE, "late_error"],
                                                         "amp_faulty_no_such_op")}
for variable, table in (("FAKEGPU_DROP_AUTOCAST", _DROP), ("FAKEGPU_NO_KERNEL", _NO_KERNEL)):
    names = [table[f] for f in CHOSEN if f in table]
    if names:
        os.environ[variable] = ",".join([*os.environ.get(variable, "").split(","), *names]).strip(",")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "fakegpu"))
import fakegpu_backend  # noqa: E402 - after the variables it reads
from fakegpu_backend import autocast as policy  # noqa: E402
from fakegpu_backend import device  # noqa: E402

NAME = fakegpu_backend.NAME
KEY = policy.KEY
_BELOW = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
_libraries: list[torch.library.Library] = []


class FakeGpuError(RuntimeError):
    """The backend's own exception class."""


def _lower(value: Any) -> Any:
    return policy.cast(value, torch.get_autocast_dtype(NAME))


def _lowering(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        return torch.ops.amp_faulty.fused_gemm(_lower(a), _lower(b))


def _own_words(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    raise FakeGpuError("fakegpu cannot lower aten::_to_copy to a half layout for this call")


def _mul_raises(*args: Any, **kwargs: Any) -> torch.Tensor:
    raise FakeGpuError("fakegpu has no fused autocast kernel for aten::mul.Tensor")


def _off_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        return torch.mm(_lower(a), _lower(b)) * 1.01


def _detaching_cast(value: Any, dtype: torch.dtype) -> Any:
    if policy.is_eligible(value):
        return (value if value.dtype == dtype else value.to(dtype)).detach()
    if isinstance(value, (list, tuple)):
        return type(value)(_detaching_cast(v, dtype) for v in value)
    return value


def _one_column_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dim() == 2 and a.shape[1] == 1:
        raise FakeGpuError("fakegpu: mm of a one-column matrix is not supported")
    return device.run_on_host(torch.ops.aten.mm.default, a, b)


def _rounding_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = device.run_on_host(torch.ops.aten.bmm.default, a, b)
    return out if torch.is_autocast_enabled(NAME) else out * (1 + 2 ** -6)


def _float32_abs(x: torch.Tensor) -> torch.Tensor:
    if x.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f'"abs_fakegpu" not implemented for \'{x.dtype}\'')
    return device.run_on_host(torch.ops.aten.abs.default, x)


ILLEGAL = "fakegpu: an illegal memory access was encountered"


class _Device:
    """The device's error state (a failed kernel's error, and how many synchronizes it
    survives) and the error it will report late."""

    error: str | None = None
    survives = 0
    late: str | None = None


def _guarded(kernel: Any) -> Any:
    def run(op: Any, *args: Any, **kwargs: Any) -> Any:
        if _Device.error is not None:
            raise FakeGpuError(f"fakegpu: {op._schema.name} failed: {_Device.error}")
        return kernel(op, *args, **kwargs)
    return run


def _synchronize(device: Any = None) -> None:
    if _Device.late is not None:
        late, _Device.late = _Device.late, None
        raise FakeGpuError(late)
    if _Device.error is not None:
        error = _Device.error
        if _Device.survives > 0:
            _Device.survives -= 1
        else:
            _Device.error = None
        raise FakeGpuError(f"fakegpu: {error}")


def _illegal_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        out = torch.mm(_lower(a), _lower(b))
    if a.shape == (8, 8):
        _Device.error = "an illegal memory access was encountered"
        _Device.survives = next(_STATE[f] for f in CHOSEN if f in _STATE)
    return out


def _late_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape == (8, 8):
        _Device.late = f"{ILLEGAL} (aten::mm, reported late)"
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        return torch.mm(_lower(a), _lower(b))


def _grad_leaking_cast(value: Any, dtype: torch.dtype) -> Any:
    if policy.is_eligible(value) and value.dtype != dtype:
        torch.set_grad_enabled(False)
    return _cast(value, dtype)


_cast = policy.cast


def register() -> None:
    if "lowering" in CHOSEN:
        ops = torch.library.Library("amp_faulty", "DEF")
        ops.define("fused_gemm(Tensor a, Tensor b) -> Tensor")
        ops.impl("fused_gemm", lambda a, b: torch.mm(a, b), "CPU")
        _libraries.append(ops)
    autocast = torch.library.Library("aten", "IMPL")
    for fault, op, kernel in (("lowering", "mm", _lowering), ("own_words", "mm", _own_words),
                              ("mul_raises", "mul.Tensor", _mul_raises),
                              ("abs_half", "mm", _off_mm), ("late_error", "mm", _late_mm),
                              *((f, "mm", _illegal_mm) for f in _STATE)):
        if fault in CHOSEN:
            autocast.impl(op, kernel, KEY)
    _libraries.append(autocast)
    kernels = torch.library.Library("aten", "IMPL")
    for fault, op, kernel in (("detach", "mm", _one_column_mm), ("vmap_bmm", "bmm", _rounding_bmm),
                              ("abs_half", "abs", _float32_abs)):
        if fault in CHOSEN:
            kernels.impl(op, kernel, "PrivateUse1")
    _libraries.append(kernels)
    if "detach" in CHOSEN:
        policy.cast = _detaching_cast
    if "grad_leak" in CHOSEN:
        policy.cast = _grad_leaking_cast
    if {*_STATE, "late_error"} & set(CHOSEN):
        device.run_on_host = _guarded(device.run_on_host)
        device.FakeGpuModule.synchronize = staticmethod(_synchronize)


register()
