"""A fake device that behaves like the device for a library's wrapper (``--fake``).

FakeTensorMode runs a device's ops without it, but a library's module meets more than ops:
``torch.autocast("cuda")`` disables itself where CUDA is not available; indexing
(``x[0]``), ``module.to(device)``, ``.float()`` and random initialisation reach device code
a build without the device lacks ("PyTorch is not linked with support for cuda devices") or
swap a fake parameter in place, which FakeTensorMode refuses; building autograd history on
fake tensors of an absent device aborts the process; and the meta kernels of a matmul
accept operands of two dtypes that the device's kernel refuses. Here each of those behaves
as on the device, and what still cannot run is a named not-applicable skip ("not applicable
on a fake device: ..."), never the wrapper's failure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.checks.wrappers import fake_calls
from amp_conformance.checks.wrappers.fake_calls import indexed, not_applicable
from amp_conformance.core import devices
from amp_conformance.core.errors import missing_kernel
from amp_conformance.core.target import Target

aten = torch.ops.aten

#: what a build without the device says when code reaches for the device itself
_ABSENT = re.compile(r"not linked with support for|not compiled with|no CUDA GPUs|"
                     r"Found no NVIDIA driver|without ATen_cuda|requires CUDA support|DataDependentOutput|"
                     r"data-dependent|DynamicOutputShape", re.I)
#: in-place random fills
_FILLS = {aten.uniform_, aten.normal_, aten.random_, aten.bernoulli_, aten.exponential_,
          aten.cauchy_, aten.log_normal_, aten.geometric_}
#: ops whose device kernels refuse operands of two floating dtypes (the dtype check the
#: meta kernels leave out): op -> the positions of the operands that must agree
_SAME_DTYPE = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2),
               aten.baddbmm.default: (1, 2), aten.addbmm.default: (1, 2),
               aten.mv.default: (0, 1), aten.addmv.default: (1, 2), aten.dot.default: (0, 1),
               aten.vdot.default: (0, 1), aten.convolution.default: (0, 1)}


@contextlib.contextmanager
def available(device: str) -> Iterator[None]:
    """The device as the one available accelerator (``fake_calls.device_available``): a
    GPU with bfloat16, and what ``torch.autocast`` asks of it (without it CUDA's region
    disables itself; torch 2.6's MPS region asks for macOS 14, which a fake Mac runs)."""
    with contextlib.ExitStack() as stack:
        if device == "cuda":
            stack.enter_context(mock.patch.object(
                torch.cuda.amp.common, "amp_definitely_not_available", lambda: False))
        if device == "mps" and hasattr(torch.backends.mps, "is_macos_or_newer"):
            stack.enter_context(mock.patch.object(
                torch.backends.mps, "is_macos_or_newer", lambda major, minor: True))
        stack.enter_context(fake_calls.device_available(device))
        yield


@contextlib.contextmanager
def on_host(target: Target) -> Iterator[None]:
    """Where a check of the autocast state autograd runs in (a decorator's backward) runs
    on a fake device: real host tensors carry the graph (autograd on fake tensors of an
    absent device aborts the process), the device's autocast, regions and decorators as
    on the device. What it checks, the state backward sees, does not depend on where the
    tensors live."""
    if not target.fake:
        yield
        return
    with available(target.device):
        yield


def _to(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``Tensor.to`` as the copy it stands for (the binding's device guard is absent)."""
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    copy = kwargs.get("copy", False)
    moved = device is not None and torch.device(device).type != x.device.type
    if not (moved or copy or (dtype is not None and dtype != x.dtype)):
        return x
    if moved and getattr(x, "constant", None) is not None:
        # a small constant (``torch.tensor(0)``) is copied for real, on a device the build
        # lacks: move an alias that forgets its value (fake tensors carry none)
        x = aten.alias.default(x)
        x.constant = None
    return aten._to_copy.default(x, dtype=dtype or x.dtype,
                                 device=device if moved else x.device,
                                 memory_format=memory_format or torch.preserve_format)


def _methods(device: str) -> contextlib.ExitStack:
    """Indexing, ``.to``, ``.cuda`` and ``.contiguous`` of the device's fake tensors as the
    ops they stand for (their bindings ask for the device's guard, which the build may lack). Patched on
    the class, not seen by a TorchFunctionMode: a mode misses the calls made inside a torch
    function written in Python (``nn.init``'s ``tensor[0][0]``)."""
    from torch._subclasses.fake_tensor import FakeTensor

    stack = contextlib.ExitStack()
    originals = {name: getattr(torch.Tensor, name)
                 for name in ("__getitem__", "to", "cuda", "contiguous")}

    def ours(x: Any) -> bool:
        return isinstance(x, FakeTensor) and x.device.type == device

    def getitem(self: torch.Tensor, index: Any) -> torch.Tensor:
        return indexed(self, index) if ours(self) else originals["__getitem__"](self, index)

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _to(self, *args, **kwargs) if isinstance(self, FakeTensor) \
            else originals["to"](self, *args, **kwargs)

    def cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _to(self, "cuda") if device == "cuda" and isinstance(self, FakeTensor) \
            else originals["cuda"](self, *args, **kwargs)
    def contiguous(self: torch.Tensor, memory_format: torch.memory_format =
                   torch.contiguous_format) -> torch.Tensor:
        if not ours(self) or self.is_contiguous(memory_format=memory_format):
            return originals["contiguous"](self, memory_format=memory_format)
        return aten.clone.default(self, memory_format=memory_format)
    for name, method in (("__getitem__", getitem), ("to", to), ("cuda", cuda),
                         ("contiguous", contiguous)):
        stack.enter_context(mock.patch.object(torch.Tensor, name, method))
    return stack


class _AsTheDevice(TorchDispatchMode):
    """Refuses a matmul or convolution of operands on two devices or of two floating dtypes,
    as the device's kernel does;
    random fills fill nothing (fake tensors have no values; the device's generator is
    absent); a constant copied onto the device forgets its value (FakeTensorMode would copy
    it for real, onto a device the build lacks); reading a value is not applicable, named
    with the call."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in _FILLS:
            return args[0]
        if func is aten._local_scalar_dense.default:
            raise not_applicable("reads a tensor's value (bool(), int(), float() or a "
                                 "comparison of a tensor; fake tensors carry no values)")
        if func is aten._to_copy.default and getattr(args[0], "constant", None) is not None \
                and torch.device(kwargs.get("device") or args[0].device).type == self.device:
            args = (_forgetting(args[0]), *args[1:])
        where = _SAME_DTYPE.get(func)
        if where is not None:
            a, b = (args[i] for i in where)
            if a.device != b.device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found "
                                   f"at least two devices, {a.device} and {b.device}! ({func}: "
                                   "the device's kernel refuses them; so does the fake device)")
            if a.dtype != b.dtype:
                raise RuntimeError(f"{func}: expected both operands to have the same dtype, "
                                   f"but got: {a.dtype} != {b.dtype} (the device's kernel "
                                   "refuses them; so does the fake device)")
        return func(*args, **kwargs)


def _forgetting(x: torch.Tensor) -> torch.Tensor:
    """An alias of a fake constant that forgets its value."""
    alias = aten.alias.default(x)
    alias.constant = None
    return alias


def _apply(module: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor],
           recurse: bool = True) -> torch.nn.Module:
    """``Module._apply`` making new parameters (a fake parameter cannot be swapped)."""
    for child in module.children() if recurse else ():
        _apply(child, fn)
    for key, param in module._parameters.items():
        if param is not None:
            with torch.no_grad():
                module._parameters[key] = torch.nn.Parameter(fn(param), param.requires_grad)
    for key, buffer in module._buffers.items():
        if buffer is not None:
            module._buffers[key] = fn(buffer)
    return module


@contextlib.contextmanager
def _autograd_off() -> Iterator[None]:
    """Grad mode off for good and the cast cache off: autograd history on fake tensors of an
    absent device, and the cast cache's cast of a parameter (a leaf that requires grad),
    abort the process."""
    set_grad = torch._C._set_grad_enabled
    cache = torch.is_autocast_cache_enabled()
    validate = torch.distributions.Distribution._validate_args
    torch.set_autocast_cache_enabled(False)
    # a distribution's default argument checks read values: off, as fake tensors have none
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        with torch.no_grad(), mock.patch.object(torch._C, "_set_grad_enabled",
                                                lambda mode: set_grad(False)):
            yield
    finally:
        torch.set_autocast_cache_enabled(cache)
        torch.distributions.Distribution.set_default_validate_args(validate)


@contextlib.contextmanager
def on_device(target: Target) -> Iterator[None]:
    """Where a wrapper check builds and runs its wrapper: the device, or the fake device
    made to behave like it (no autograd: building it aborts without the device)."""
    if not target.fake or torch.nn.Module._apply is _apply:  # real; or inside this already
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor

    device, absent = target.device, not devices.is_available(target.device)

    def ours(x: Any) -> bool:
        return isinstance(x, FakeTensor) and x.device.type == device
    with target.tensors(), available(device), _autograd_off(), \
            mock.patch.object(torch.nn.Module, "_apply", _apply), _methods(device), \
            fake_calls.methods(ours, device), _AsTheDevice(device), fake_calls.Valueless():
        try:
            yield
        except (RuntimeError, AssertionError, NotImplementedError, AttributeError,
                ValueError, TypeError) as exc:
            raise _named(exc, device, absent) from exc


def _named(exc: BaseException, device: str, absent: bool) -> BaseException:
    """What the fake device could not do, named with the call (``exc`` itself where the
    wrapper did it)."""
    said = f"{type(exc).__name__}: {_whole(exc)}"
    op = missing_kernel(exc)
    backend = re.search(r"from the '(\w+)' backend", str(exc))
    if op and absent and backend and backend.group(1).lower() == device:
        # a call that reached the real backend: a tensor made outside the fake device
        return not_applicable(f"{op} reached the real {device} backend, which this build "
                              f"lacks (a tensor made outside the fake device): {said}",
                              exc.__traceback__)
    if _ABSENT.search(said) or isinstance(exc, AttributeError) and "torch._C" in said:
        return not_applicable(said, exc.__traceback__)
    return exc


def _whole(exc: BaseException, limit: int = 600) -> str:
    """The exception's message, its lines joined, cut before a dispatcher's listing of
    backends."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text.split(" is only available for these backends")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"
