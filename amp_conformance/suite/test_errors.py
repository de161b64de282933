"""Error paths of torch.autocast: bad device, bad dtype, bad decorator use, absent device."""

import contextlib
import importlib.util
import warnings
from unittest import mock

import pytest
import torch

from amp_conformance.core import devices
from amp_conformance.core.probes import probe
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.schema import messages

pytestmark = pytest.mark.amp_check("errors")


def _message(message_id):
    m = messages.expected(message_id)
    if m is None:
        pytest.skip(f"not applicable: no recorded wording of {message_id!r} for torch {torch.__version__}")
    return m


@contextlib.contextmanager
def _must_raise(exc_type, call, why):
    """pytest.raises whose failure names the call that was accepted and why it must not be."""
    try:
        with pytest.raises(exc_type) as info:
            yield info
    except pytest.fail.Exception:
        pass
    else:
        return
    pytest.fail(f"{call} was accepted: {why} must raise {exc_type.__name__}")


def test_invalid_device_string():
    m = _message("invalid_device")
    with unchanged_autocast_state("cpu", "the check"):
        with _must_raise(RuntimeError, "torch.autocast('not a real device')",
                         "an invalid device string") as info:
            torch.autocast("not a real device")
    assert m.matches(str(info.value)), f"message {str(info.value)!r}, expected {m.text!r}"


def test_is_autocast_available_rejects_invalid_device():
    m = _message("invalid_device")
    with _must_raise(RuntimeError, "torch.amp.is_autocast_available('not a real device')",
                     "an invalid device string") as info:
        torch.amp.is_autocast_available("not a real device")
    assert m.matches(str(info.value)), f"message {str(info.value)!r}, expected {m.text!r}"


def test_non_string_device_type(amp_target):
    m = _message("non_string_device_type")
    with unchanged_autocast_state(amp_target.device, "the check"):
        with _must_raise(ValueError, f"torch.autocast(torch.device({amp_target.device!r}))",
                         "a device_type that is not a str") as info:
            torch.autocast(torch.device(amp_target.device))
    assert m.matches(str(info.value)), f"message {str(info.value)!r}, expected {m.text!r}"


def test_decorator_rejects_non_callable(amp_target):
    if amp_target.fake:
        pytest.skip("not applicable in --fake mode: torch.autocast refuses the absent device")
    m = _message("not_callable")
    with unchanged_autocast_state(amp_target.device, "the check"):
        with _must_raise(TypeError, f"torch.autocast({amp_target.device!r})(a tensor)",
                         "the decorator form given a non-callable") as info:
            torch.autocast(amp_target.device)(torch.ones(1))
    assert m.matches(str(info.value)), f"message {str(info.value)!r}, expected {m.text!r}"


def test_unsupported_dtype_warns_and_disables(amp_target):
    """float64 is no autocast dtype: torch.autocast warns and runs with autocast off."""
    dev = amp_target.device
    if amp_target.fake:
        pytest.skip("not applicable in --fake mode: torch.autocast refuses the absent device")
    if not devices.profile(dev).rejects_unsupported_dtype:
        pytest.skip("cuda rejects only bfloat16 on devices without it (see the bf16 check)")
    supported = devices.supported_amp_dtypes(dev)
    with unchanged_autocast_state(dev, "the check"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast(dev, dtype=torch.float64):
                enabled, out = torch.is_autocast_enabled(dev), probe(dev)
    user = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert user, "no UserWarning for an unsupported autocast dtype"
    assert not enabled and out == torch.float32, (
        f"after the warning autocast is enabled={enabled} and torch.mm gave {out}; it must be off"
    )
    m = messages.expected("unsupported_dtype")
    if m is None:
        pytest.skip(f"not applicable: warned and disabled; no recorded wording for torch {torch.__version__}")
    fields = {"DEVICE": dev.upper(), "device": dev,
              "SUPPORTED": ", ".join(map(str, [torch.bfloat16, torch.float16]))}
    if dev == devices.privateuse1_name():
        fields["DEVICE"] = dev
        fields["SUPPORTED"] = ", ".join(map(str, supported))
    assert any(m.matches(u, **fields) for u in user), f"warnings {user}, expected {m.text.format(**fields)!r}"


def test_unavailable_cuda_warns_and_disables():
    """torch.autocast('cuda') where CUDA is absent warns and leaves autocast off."""
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the unavailable-device path cannot be exercised")
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("not applicable: torch_xla is installed, and PyTorch then lets "
                    "torch.autocast('cuda') run without CUDA (XLA:GPU uses CUDA's autocast: "
                    "torch.cuda.amp.common.amp_definitely_not_available)")
    m = _message("cuda_unavailable")
    with unchanged_autocast_state("cuda", "the check"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.autocast("cuda"):
                enabled = torch.is_autocast_enabled("cuda")
    user = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert not enabled, "torch.autocast('cuda') enabled autocast although CUDA is absent"
    assert any(m.matches(u) for u in user), f"warnings {user}, expected {m.text!r}"


def test_cuda_bfloat16_unsupported_raises(amp_target):
    """torch.autocast('cuda', dtype=torch.bfloat16) raises where the GPU lacks bfloat16.

    torch.autocast decides by asking ``torch.cuda.is_bf16_supported()``, whose answer counts
    emulation: any GPU that can hold a bfloat16 tensor (every one current torch supports,
    in practice) answers yes. A GPU without bfloat16 is then emulated by making that
    question answer no, so the refusal is checked on every CUDA device, not only on one
    nobody tests on.
    """
    if amp_target.device != "cuda" or amp_target.fake:
        pytest.skip("not applicable: only a real CUDA device reaches torch.autocast's bfloat16 "
                    "check (without one, torch.autocast('cuda') warns that CUDA is unavailable "
                    "and disables itself before asking)")
    m = _message("cuda_bf16_unsupported")
    emulated = torch.cuda.is_bf16_supported()
    without_bf16 = (mock.patch.object(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
                    if emulated else contextlib.nullcontext())
    call = "torch.autocast('cuda', dtype=torch.bfloat16)" + (
        " (torch.cuda.is_bf16_supported() made to answer False)" if emulated else "")
    with unchanged_autocast_state("cuda", "the check"), without_bf16:
        with _must_raise(RuntimeError, call, "a CUDA device without bfloat16") as info:
            torch.autocast("cuda", dtype=torch.bfloat16)
    assert m.matches(str(info.value)), f"message {str(info.value)!r}, expected {m.text!r}"
