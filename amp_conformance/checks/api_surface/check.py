"""The autocast API surface beyond torch.autocast: legacy and device-module getters and
setters, ``_is_any_autocast_enabled``, the legacy ``custom_fwd``/``custom_bwd``, the
absent-CUDA warnings, and the ``fp32_append_dtype`` norm policy with float64 inputs.

Facts that differ between torch versions carry the versions they were seen in; an API the
running torch lacks makes its check not applicable (``NotApplicable``), never passed.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.torch_version import TorchVersion

from amp_conformance.core import devices
from amp_conformance.core.devices import dtype_name
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.target import Target
from amp_conformance.schema.defects import KNOWN_GAP


def _release(version: str | None = None) -> TorchVersion:
    return TorchVersion(re.match(r"\d+(\.\d+)*", version or torch.__version__).group())


# -- torch.is_autocast_enabled() and torch._C._is_any_autocast_enabled() -------------


def check_noarg_is_autocast_enabled(target: Target) -> None:
    """``torch.is_autocast_enabled()`` without a device is the deprecated CUDA form: it
    reports CUDA's flag only, whatever other device is in a region (seen on 2.13.0)."""
    dev = target.device
    with target.autocast():
        inside = (torch.is_autocast_enabled(), torch.is_autocast_enabled("cuda"))
    if inside[0] != inside[1] or inside[0] != (dev == "cuda"):
        raise ConformanceFailure(
            f"inside a {dev} autocast region torch.is_autocast_enabled() is {inside[0]}, "
            f"torch.is_autocast_enabled('cuda') {inside[1]}: without a device it must report "
            "CUDA's flag only (the deprecated CUDA form)"
        )
    before = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", True)
    try:
        switched = torch.is_autocast_enabled()
    finally:
        torch.set_autocast_enabled("cuda", before)
    if not switched:
        raise ConformanceFailure("with CUDA's autocast flag set, torch.is_autocast_enabled() "
                                 "is False: without a device it must report CUDA's flag")


#: Device types whose flag ``torch._C._is_any_autocast_enabled()`` does not consult
#: (``is_any_autocast_enabled`` in torch/csrc/autograd/init.cpp): (since, until, note).
ANY_AUTOCAST_GAPS: dict[str, tuple[str | None, str | None, str]] = {
    "mps": (None, None, "not in its device list (seen on 2.13.0)"),
    "maia": (None, None, "not in its device list (seen on 2.13.0)"),
    "mtia": (None, "2.13", "added by pytorch#182440 (seen on 2.13.0)"),
}


def any_autocast_gap(device: str, version: str | None = None) -> str | None:
    """Why ``_is_any_autocast_enabled()`` is known to ignore ``device`` on this torch."""
    if device not in ANY_AUTOCAST_GAPS:
        return None
    since, until, note = ANY_AUTOCAST_GAPS[device]
    r = _release(version)
    if (since and r < since) or (until and r >= until):
        return None
    return (f"{KNOWN_GAP}torch._C._is_any_autocast_enabled() ignores {device}'s flag, "
            f"{note}")


def check_any_autocast_enabled(device: str) -> None:
    """Switching one device type's autocast flag on (directly: works for absent devices)
    makes ``torch._C._is_any_autocast_enabled()`` true; switching it back, false."""
    if not hasattr(torch._C, "_is_any_autocast_enabled"):
        raise NotApplicable(f"not applicable: torch {torch.__version__} has no "
                            "torch._C._is_any_autocast_enabled")
    try:
        before = torch.is_autocast_enabled(device)
    except RuntimeError as exc:
        raise NotApplicable(f"not applicable: torch {torch.__version__} keeps no autocast "
                            f"state for {device}: {exc}") from None
    if before or torch._C._is_any_autocast_enabled():
        raise ConformanceFailure(f"an autocast flag is already on before switching {device}'s")
    torch.set_autocast_enabled(device, True)
    try:
        on = torch._C._is_any_autocast_enabled()
    finally:
        torch.set_autocast_enabled(device, before)
    off = torch._C._is_any_autocast_enabled()
    if not on or off:
        raise ConformanceFailure(
            f"with only {device}'s autocast flag on, torch._C._is_any_autocast_enabled() is "
            f"{on}; after switching it off again, {off}: it must report whether any device "
            "type's autocast is on (torch.compile and AOTAutograd read it)"
        )


# -- getters and setters --------------------------------------------------------------

#: The legacy per-device getters of torch (deprecated, still present in 2.13.0).
LEGACY_GETTERS: dict[str, tuple[str, str | None]] = {
    "cpu": ("get_autocast_cpu_dtype", "is_autocast_cpu_enabled"),
    "cuda": ("get_autocast_gpu_dtype", None),  # enabled: the no-argument is_autocast_enabled
    "xla": ("get_autocast_xla_dtype", "is_autocast_xla_enabled"),
    "ipu": ("get_autocast_ipu_dtype", "is_autocast_ipu_enabled"),
}


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The legacy getters warn DeprecationWarning; that is not what these checks check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def check_legacy_getters(target: Target, dtype: torch.dtype) -> None:
    """Inside a region of ``dtype`` the legacy getter returns the very dtype object that
    ``torch.get_autocast_dtype(device)`` returns (pytorch#65786: it returned a new dtype
    object, so ``is`` failed), and outside it the device's current dtype."""
    dev = target.device
    if dev not in LEGACY_GETTERS or not hasattr(torch, LEGACY_GETTERS[dev][0]):
        raise NotApplicable(f"not applicable: torch {torch.__version__} has no legacy autocast "
                            f"dtype getter for {dev}")
    name, enabled_name = LEGACY_GETTERS[dev]
    getter = getattr(torch, name)
    is_enabled = getattr(torch, enabled_name) if enabled_name else torch.is_autocast_enabled
    with _quiet():
        outside = (getter(), is_enabled())
        with target.autocast(dtype):
            inside = (getter(), is_enabled(), torch.get_autocast_dtype(dev))
    if not (inside[0] is dtype and inside[2] is dtype and inside[1] is True):
        raise ConformanceFailure(
            f"inside torch.autocast({dev!r}, dtype={dtype}): torch.{name}() -> {inside[0]} "
            f"(is {dtype}: {inside[0] is dtype}), torch.get_autocast_dtype({dev!r}) -> "
            f"{inside[2]} (is {dtype}: {inside[2] is dtype}), enabled {inside[1]}; expected the "
            "same dtype object from both getters and enabled True (pytorch#65786)"
        )
    current = torch.get_autocast_dtype(dev)
    if outside[0] is not current or outside[1] is not False:
        raise ConformanceFailure(f"outside any region torch.{name}() -> {outside[0]}, enabled "
                                 f"{outside[1]}; expected {current} (the same object), False")


def _module_api(device: str) -> dict[str, Callable[..., Any]]:
    module = devices.device_module(device)
    names = ("get_autocast_dtype", f"get_autocast_{device}_dtype", "set_autocast_dtype",
             f"set_autocast_{device}_dtype", "is_autocast_enabled",
             f"is_autocast_{device}_enabled", "set_autocast_enabled",
             f"set_autocast_{device}_enabled")
    return {n: getattr(module, n) for n in names if callable(getattr(module, n, None))}


def check_device_module_api(target: Target, dtype: torch.dtype) -> None:
    """``torch.<device>``'s own autocast getters and setters, where the module has them
    (e.g. a PrivateUse1 backend's), agree with torch's device-generic state."""
    dev = target.device
    if devices.device_module(dev) is None:
        raise NotApplicable(f"not applicable: there is no torch.{dev} module")
    api = _module_api(dev)
    if not api:
        raise NotApplicable(f"not applicable: torch.{dev} has no autocast getters or setters "
                            f"of its own (torch {torch.__version__} keeps them in torch.*)")
    with target.autocast(dtype):
        seen = {n: f() for n, f in api.items() if n.startswith(("get_", "is_"))}
    wrong = {n: v for n, v in seen.items() if v != (dtype if "dtype" in n else True)}
    before = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
    try:
        for n, f in api.items():
            if n.startswith("set_"):
                value = dtype if "dtype" in n else True
                f(value)
                now = torch.get_autocast_dtype(dev) if "dtype" in n else torch.is_autocast_enabled(dev)
                if now != value:
                    wrong[n] = f"set {value}, torch then reports {now}"
    finally:
        torch.set_autocast_enabled(dev, before[0])
        torch.set_autocast_dtype(dev, before[1])
    if wrong:
        raise ConformanceFailure(f"torch.{dev}'s autocast API disagrees with torch's state "
                                 f"(region dtype {dtype}): {wrong}")


# -- legacy custom_fwd / custom_bwd ---------------------------------------------------

#: The FutureWarning of the legacy decorators (torch >= 2.4; seen on 2.13.0).
LEGACY_DECORATOR_WARNING = ("`torch.{device}.amp.{name}(args...)` is deprecated. Please use "
                            "`torch.amp.{name}(args..., device_type='{device}')` instead.")
LEGACY_DECORATOR_SINCE = "2.4"


def legacy_decorators(device: str) -> dict[str, Callable[..., Any]]:
    amp = getattr(devices.device_module(device), "amp", None)
    return {n: getattr(amp, n) for n in ("custom_fwd", "custom_bwd") if hasattr(amp, n)}


def _expect_deprecation(warned: list, name: str, device: str) -> None:
    if _release() < LEGACY_DECORATOR_SINCE:
        return
    text = LEGACY_DECORATOR_WARNING.format(device=device, name=name)
    if (FutureWarning, text) not in warned:
        raise ConformanceFailure(f"decorating with torch.{device}.amp.{name} warned {warned}; "
                                 f"expected the FutureWarning {text!r}")


def _recorder(fwd_decorator: Callable[..., Any], bwd_decorator: Callable[..., Any],
              device: str, seen: list) -> tuple[type, list]:
    """A Function whose forward and backward log the autocast state and the inputs'
    dtypes, and the warnings decorating it emitted."""
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")

        class Recorder(torch.autograd.Function):
            @staticmethod
            @fwd_decorator
            def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
                seen.append(("forward", a.dtype, b.dtype, torch.is_autocast_enabled(device),
                             torch.get_autocast_dtype(device)))
                return a.float() * b.float()

            @staticmethod
            @bwd_decorator
            def backward(ctx: Any, grad: torch.Tensor) -> tuple:
                seen.append(("backward", torch.is_autocast_enabled(device),
                             torch.get_autocast_dtype(device)))
                return grad, grad

    return Recorder, [(w.category, str(w.message)) for w in warned]


def _run(target: Target, dtype: torch.dtype, decorators: tuple, backward: bool) -> tuple:
    """Forward inside a region of ``dtype`` (backward outside it) of a Function decorated
    with ``decorators``; the state log and the warnings of decorating."""
    dev, log = target.device, []
    fn, warned = _recorder(*decorators, dev, log)
    with target.tensors():
        a = torch.ones(2, 2, dtype=dtype, device=dev)
        b = torch.ones(2, 2, device=dev).requires_grad_(backward)
        with target.autocast(dtype):
            out = fn.apply(a, b)
        if backward:
            out.sum().backward()
    return log, warned


def _identity(f: Callable[..., Any]) -> Callable[..., Any]:
    return f


def _with_kwargs(decorator: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """``decorator`` applied as ``@decorator`` (no kwargs) or ``@decorator(**kwargs)``."""
    return (lambda f: decorator(**kwargs)(f)) if kwargs else decorator


def check_legacy_custom_fwd(target: Target, dtype: torch.dtype) -> None:
    """``torch.<device>.amp.custom_fwd`` (with and without cast_inputs) warns FutureWarning
    and behaves like ``torch.amp.custom_fwd(device_type=<device>)``."""
    dev, legacy = target.device, legacy_decorators(target.device)
    if "custom_fwd" not in legacy:
        raise NotApplicable(f"not applicable: torch.{dev}.amp has no legacy custom_fwd (torch "
                            f"{torch.__version__} has one for cuda only)")
    for kwargs in ({}, {"cast_inputs": torch.float32}):
        got, warned = _run(target, dtype, (_with_kwargs(legacy["custom_fwd"], **kwargs),
                                           _identity), False)
        _expect_deprecation(warned, "custom_fwd", dev)
        generic = _with_kwargs(torch.amp.custom_fwd, device_type=dev, **kwargs)
        want, _ = _run(target, dtype, (generic, _identity), False)
        expected = (("forward", torch.float32, torch.float32, False, dtype) if kwargs
                    else ("forward", dtype, torch.float32, True, dtype))
        if got != want or want != [expected]:
            raise ConformanceFailure(
                f"torch.{dev}.amp.custom_fwd({kwargs or ''}) inside torch.autocast({dev!r}, "
                f"dtype={dtype}): forward saw {got} (inputs' dtypes, enabled, dtype); "
                f"torch.amp.custom_fwd(device_type={dev!r}) saw {want}, expected {[expected]}"
            )


def check_legacy_custom_bwd(target: Target, dtype: torch.dtype) -> None:
    """``torch.<device>.amp.custom_bwd`` warns FutureWarning and, like
    ``torch.amp.custom_bwd``, runs backward (called outside the region) in the forward's
    autocast state."""
    dev, legacy = target.device, legacy_decorators(target.device)
    if not {"custom_fwd", "custom_bwd"} <= set(legacy):
        raise NotApplicable(f"not applicable: torch.{dev}.amp has no legacy custom_fwd/"
                            f"custom_bwd (torch {torch.__version__} has them for cuda only)")
    got, warned = _run(target, dtype, (legacy["custom_fwd"], legacy["custom_bwd"]), True)
    _expect_deprecation(warned, "custom_bwd", dev)
    generic = (_with_kwargs(torch.amp.custom_fwd, device_type=dev),
               _with_kwargs(torch.amp.custom_bwd, device_type=dev))
    want, _ = _run(target, dtype, generic, True)
    expected = ("backward", True, dtype)
    if got[-1:] != want[-1:] or want[-1:] != [expected]:
        raise ConformanceFailure(
            f"torch.{dev}.amp.custom_bwd, forward inside torch.autocast({dev!r}, dtype={dtype}), "
            f"backward() outside: backward saw {got[-1:]} (enabled, dtype); "
            f"torch.amp.custom_bwd saw {want[-1:]}, expected {[expected]}"
        )


# -- no warning from a disabled region where CUDA is absent (pytorch#67598) -----------


def _warnings_of(enter: Callable[[], Any]) -> list[tuple[type, str]]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        enter()
    return [(w.category, str(w.message)) for w in seen]


def check_disabled_cuda_region_silent(legacy_notice: str | None) -> None:
    """Where CUDA is absent, ``torch.autocast("cuda", enabled=False)`` (context and
    decorator form) warns nothing, and ``torch.cuda.amp.autocast(enabled=False)`` nothing
    but its own deprecation notice (``legacy_notice``; pytorch#67598)."""
    def region() -> None:
        with torch.autocast("cuda", enabled=False):
            pass

    def decorated() -> None:
        torch.autocast("cuda", enabled=False)(lambda: None)()

    def legacy() -> None:
        with torch.cuda.amp.autocast(enabled=False):
            pass

    problems = []
    for what, enter, allowed in (
        ("torch.autocast('cuda', enabled=False)", region, None),
        ("torch.autocast('cuda', enabled=False)(fn)()", decorated, None),
        ("torch.cuda.amp.autocast(enabled=False)", legacy, legacy_notice),
    ):
        extra = [w for w in _warnings_of(enter) if w != (FutureWarning, allowed)]
        if extra:
            problems.append(f"{what} warned {extra}")
    if problems:
        raise ConformanceFailure("with CUDA absent, a disabled region must not warn "
                                 f"(pytorch#67598): {'; '.join(problems)}")


# -- fp32_append_dtype: the norm overloads with float64 inputs ------------------------

#: Norm calls users make, and the op overloads behind the fp32_append_dtype policy.
NORM_CALLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "torch.norm(x)": lambda x: torch.norm(x),
    "torch.norm(x, p=2, dim=1)": lambda x: torch.norm(x, p=2, dim=1),
    "torch.linalg.vector_norm(x)": lambda x: torch.linalg.vector_norm(x),
    "torch.linalg.norm(x)": lambda x: torch.linalg.norm(x),
}
APPEND_DTYPE_OVERLOADS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "aten::norm.Scalar": lambda x: torch.ops.aten.norm.Scalar(x, 2),
    "aten::norm.ScalarOpt_dim": lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 2, [1]),
}


def _norm_dtypes(target: Target, dtype: torch.dtype, calls: dict, inputs: dict) -> list[str]:
    wrong = []
    with target.tensors():
        for input_dtype, want in inputs.items():
            x = torch.ones(4, 4, dtype=input_dtype, device=target.device)
            with target.autocast(dtype):
                for name, call in calls.items():
                    got = call(x).dtype
                    if got != want:
                        wrong.append(f"{name} on a {dtype_name(input_dtype)} input -> {got}, "
                                     f"expected {want}")
    return wrong


def check_norm_float64(target: Target, dtype: torch.dtype) -> None:
    """Under autocast, the norms of a float64 input stay float64: float64 is never cast,
    and fp32_append_dtype appends float32 only for eligible inputs."""
    wrong = _norm_dtypes(target, dtype, NORM_CALLS, {torch.float64: torch.float64})
    if wrong:
        raise ConformanceFailure(f"inside torch.autocast({target.device!r}, dtype={dtype}): "
                                 + "; ".join(wrong))


def check_append_dtype_overloads(target: Target, dtype: torch.dtype) -> None:
    """The device's fp32_append_dtype overloads: a float64 input stays float64, float32
    and amp-dtype inputs give float32 (the appended dtype)."""
    key = devices.dispatch_key(target.device)
    registered = {n: c for n, c in APPEND_DTYPE_OVERLOADS.items()
                  if torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}
    if not registered:
        raise NotApplicable(f"not applicable: torch {torch.__version__} registers none of "
                            f"{', '.join(APPEND_DTYPE_OVERLOADS)} under {key}")
    wrong = _norm_dtypes(target, dtype, registered, {torch.float64: torch.float64,
                                                     torch.float32: torch.float32,
                                                     dtype: torch.float32})
    if wrong:
        raise ConformanceFailure(f"fp32_append_dtype inside torch.autocast({target.device!r}, "
                                 f"dtype={dtype}): " + "; ".join(wrong))
