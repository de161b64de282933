"""Error paths of ``torch.autocast``: a bad device, a bad dtype, the decorator form given no
callable, an absent device. Each raises :class:`ConformanceFailure` naming the call that
was accepted or the message that differs from the recorded wording (``schema.messages``),
or :class:`NotApplicable` where the device or torch gives nothing to check."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.probes import probe
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema import messages

_FAKE = "not applicable in --fake mode: torch.autocast refuses the absent device"


def _message(message_id: str) -> Any:
    m = messages.expected(message_id)
    if m is None:
        raise NotApplicable(f"not applicable: no recorded wording of {message_id!r} for torch "
                            f"{torch.__version__}")
    return m


@dataclass
class _Raised:
    value: BaseException | None = None


@contextlib.contextmanager
def _must_raise(exc_type: type[BaseException], call: str, why: str) -> Iterator[_Raised]:
    """The block must raise ``exc_type``; the failure names the call that was accepted and
    why it must not be."""
    raised = _Raised()
    try:
        yield raised
    except exc_type as exc:
        raised.value = exc
        return
    raise ConformanceFailure(f"{call} was accepted: {why} must raise {exc_type.__name__}")


def _same(m: Any, raised: _Raised) -> None:
    if not m.matches(str(raised.value)):
        raise ConformanceFailure(f"message {str(raised.value)!r}, expected {m.text!r}")


def check_invalid_device_string() -> None:
    m = _message("invalid_device")
    with unchanged_autocast_state("cpu", "the check"):
        with _must_raise(RuntimeError, "torch.autocast('not a real device')",
                         "an invalid device string") as raised:
            torch.autocast("not a real device")
    _same(m, raised)


def check_is_autocast_available_rejects_invalid_device() -> None:
    m = _message("invalid_device")
    with _must_raise(RuntimeError, "torch.amp.is_autocast_available('not a real device')",
                     "an invalid device string") as raised:
        torch.amp.is_autocast_available("not a real device")
    _same(m, raised)


def check_non_string_device_type(target: Target) -> None:
    m = _message("non_string_device_type")
    with unchanged_autocast_state(target.device, "the check"):
        with _must_raise(ValueError, f"torch.autocast(torch.device({target.device!r}))",
                         "a device_type that is not a str") as raised:
            torch.autocast(torch.device(target.device))
    _same(m, raised)


def check_decorator_rejects_non_callable(target: Target) -> None:
    if target.fake:
        raise NotApplicable(_FAKE)
    m = _message("not_callable")
    with unchanged_autocast_state(target.device, "the check"):
        with _must_raise(TypeError, f"torch.autocast({target.device!r})(a tensor)",
                         "the decorator form given a non-callable") as raised:
            torch.autocast(target.device)(torch.ones(1))
    _same(m, raised)


def check_unsupported_dtype_warns_and_disables(target: Target) -> None:
    """float64 is no autocast dtype: torch.autocast warns and runs with autocast off."""
    dev = target.device
    if target.fake:
        raise NotApplicable(_FAKE)
    if not devices.profile(dev).rejects_unsupported_dtype:
        raise NotApplicable("cuda rejects only bfloat16 on devices without it (see the bf16 "
                            "check)")
    supported = devices.supported_amp_dtypes(dev)
    with unchanged_autocast_state(dev, "the check"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(dev, dtype=torch.float64):
                enabled, out = torch.is_autocast_enabled(dev), probe(dev)
    user = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    if not user:
        raise ConformanceFailure("no UserWarning for an unsupported autocast dtype")
    if enabled or out != torch.float32:
        raise ConformanceFailure(f"after the warning autocast is enabled={enabled} and "
                                 f"torch.mm gave {out}; it must be off")
    m = messages.expected("unsupported_dtype")
    if m is None:
        raise NotApplicable(f"not applicable: warned and disabled; no recorded wording for "
                            f"torch {torch.__version__}")
    fields = {"DEVICE": dev.upper(), "device": dev,
              "SUPPORTED": ", ".join(map(str, [torch.bfloat16, torch.float16]))}
    if dev == devices.privateuse1_name():
        fields["DEVICE"] = dev
        fields["SUPPORTED"] = ", ".join(map(str, supported))
    if not any(m.matches(u, **fields) for u in user):
        raise ConformanceFailure(f"warnings {user}, expected {m.text.format(**fields)!r}")


def check_unavailable_cuda_warns_and_disables() -> None:
    """torch.autocast('cuda') where CUDA is absent warns and leaves autocast off."""
    if torch.cuda.is_available():
        raise NotApplicable("CUDA is available here: the unavailable-device path cannot be "
                            "exercised")
    if importlib.util.find_spec("torch_xla") is not None:
        raise NotApplicable(
            "not applicable: torch_xla is installed, and PyTorch then lets "
            "torch.autocast('cuda') run without CUDA (XLA:GPU uses CUDA's autocast: "
            "torch.cuda.amp.common.amp_definitely_not_available)")
    m = _message("cuda_unavailable")
    with unchanged_autocast_state("cuda", "the check"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast("cuda"):
                enabled = torch.is_autocast_enabled("cuda")
    user = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    if enabled:
        raise ConformanceFailure("torch.autocast('cuda') enabled autocast although CUDA is "
                                 "absent")
    if not any(m.matches(u) for u in user):
        raise ConformanceFailure(f"warnings {user}, expected {m.text!r}")


def check_cuda_bfloat16_unsupported_raises(target: Target) -> None:
    """torch.autocast('cuda', dtype=torch.bfloat16) raises where the GPU lacks bfloat16.

    torch.autocast decides by asking ``torch.cuda.is_bf16_supported()``, whose answer counts
    emulation: any GPU that can hold a bfloat16 tensor (every one current torch supports,
    in practice) answers yes. A GPU without bfloat16 is then emulated by making that
    question answer no, so the refusal is checked on every CUDA device, not only on one
    nobody tests on.
    """
    if target.device != "cuda" or target.fake:
        raise NotApplicable(
            "not applicable: only a real CUDA device reaches torch.autocast's bfloat16 check "
            "(without one, torch.autocast('cuda') warns that CUDA is unavailable and disables "
            "itself before asking)")
    m = _message("cuda_bf16_unsupported")
    emulated = torch.cuda.is_bf16_supported()
    without_bf16 = (mock.patch.object(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
                    if emulated else contextlib.nullcontext())
    call = "torch.autocast('cuda', dtype=torch.bfloat16)" + (
        " (torch.cuda.is_bf16_supported() made to answer False)" if emulated else "")
    with unchanged_autocast_state("cuda", "the check"), without_bf16:
        with _must_raise(RuntimeError, call, "a CUDA device without bfloat16") as raised:
            torch.autocast("cuda", dtype=torch.bfloat16)
    _same(m, raised)
