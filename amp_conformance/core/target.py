"""The device under test: a real device, or a device's policy run through FakeTensorMode.

Checks never call ``torch.autocast`` directly; they ask the target, so the same check
runs against real hardware and, with ``--fake``, against a device that is not here.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from amp_conformance.core import devices, sync


@dataclass(frozen=True)
class Target:
    device: str
    fake: bool = False

    @property
    def has_values(self) -> bool:
        """Fake tensors carry no values: numerics checks do not apply to them."""
        return not self.fake

    def tensors(self) -> contextlib.AbstractContextManager:
        """Context in which inputs are built and ops run (FakeTensorMode when fake)."""
        return _fake_tensors(self.device) if self.fake else contextlib.nullcontext()

    def end_step(self) -> None:
        """Where a training loop cuts a lazy device's graph (its declared step boundary);
        nothing on other devices."""
        boundary = None if self.fake else sync.step_boundary(self.device)
        if boundary is not None:
            boundary()

    def autocast(
        self,
        dtype: torch.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> contextlib.AbstractContextManager:
        if not self.fake:
            return torch.autocast(self.device, dtype=dtype, enabled=enabled,
                                  cache_enabled=cache_enabled)
        return _switched_autocast(self.device, dtype, enabled, cache_enabled)

    def __str__(self) -> str:
        return f"{self.device} (fake)" if self.fake else self.device


@contextlib.contextmanager
def _fake_tensors(device: str) -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with contextlib.ExitStack() as stack:
        profile = devices.profile(device)
        if "cudnn_off" in profile.fake_quirks and not devices.is_available(device):
            # A CUDA build without a GPU would send torch.lstm & co. down the cuDNN path,
            # which starts CUDA and fails; a CPU build never takes it. Fake runs take the
            # portable path on both, so their results do not depend on how torch was built.
            stack.enter_context(torch.backends.cudnn.flags(enabled=False))
        if not devices.is_available(device):
            stack.enter_context(_no_real_context_for(device))
        refusals = (tuple(profile.refuses.items()),
                    tuple(r for r in profile.refuses_ops if r.in_release()))
        mode = _refusing(device, *refusals) if any(refusals) else FakeTensorMode
        stack.enter_context(mode(allow_non_fake_inputs=True))
        yield


@functools.cache  # one class per device and refusals, made at its first fake tensors
def _refusing(device: str, dtypes: tuple, ops: tuple[devices.OpRefusal, ...]) -> type:
    """FakeTensorMode refusing what the device refuses, with the device's own error: an op
    that makes a tensor of the device in a dtype it lacks (``DeviceProfile.refuses``), an op
    given inputs its kernel there refuses (``DeviceProfile.refuses_ops`` of the running
    torch's release). A subclass, not a
    mode of its own: dynamo compiles under FakeTensorMode, not under a user's
    TorchDispatchMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    refuses = dict(dtypes)

    class Refusing(FakeTensorMode):
        depth = 0  # FakeTensorMode dispatches again inside a call: only the outer one refuses

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if ops and not self.depth:
                name = str(func)
                for refusal in ops:
                    if refusal.refused(name, args, kwargs or {}) and _on(device, args):
                        raise refusal.kind(refusal.message)
            self.depth += 1
            try:
                out = super().__torch_dispatch__(func, types, args, kwargs)
            finally:
                self.depth -= 1
            if self.depth:
                return out
            for t in torch.utils._pytree.tree_leaves(out):
                if (isinstance(t, torch.Tensor) and t.device.type == device
                        and t.dtype in refuses):
                    kind, message = refuses[t.dtype]
                    raise kind(message)
            return out
    return Refusing


def _on(device: str, args: tuple) -> bool:
    """Whether the call's first tensor is on ``device`` (whose kernel would run)."""
    first = next((t for t in torch.utils._pytree.tree_leaves(args)
                  if isinstance(t, torch.Tensor)), None)
    return first is not None and first.device.type == device


@contextlib.contextmanager
def _no_real_context_for(device: str) -> Iterator[None]:
    """Keep FakeTensorMode from making a real ``device`` tensor when ``device`` is absent.

    torch 2.11's ``init_gpu_context`` makes a real tensor of a fake cuda/xpu tensor's device
    whenever CUDA or XPU is available, so a fake xpu tensor on a CUDA host raised "Torch not
    compiled with XPU enabled" (newer torch asks whether the device is the current
    accelerator). An absent device has no context to initialize: its call is skipped, every
    other device's goes to torch's own function, which is put back on exit."""
    from torch._subclasses import fake_tensor

    original = getattr(fake_tensor, "init_gpu_context", None)
    if original is None:
        yield
        return

    def init_gpu_context(dev: torch.device) -> None:
        if torch.device(dev).type != device:
            original(dev)

    fake_tensor.init_gpu_context = init_gpu_context
    try:
        yield
    finally:
        fake_tensor.init_gpu_context = original


@contextlib.contextmanager
def _switched_autocast(
    device: str, dtype: torch.dtype | None, enabled: bool, cache_enabled: bool | None
) -> Iterator[None]:
    """Enter an autocast region by switching the state directly, as torch.autocast would.

    Used where torch.autocast refuses because the hardware is absent; every switch is
    undone on exit, also when the body raises.
    """
    prev_enabled = torch.is_autocast_enabled(device)
    prev_dtype = torch.get_autocast_dtype(device)
    prev_cache = torch.is_autocast_cache_enabled()
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype if dtype is not None else prev_dtype)
    torch.autocast_increment_nesting()
    if cache_enabled is not None:
        torch.set_autocast_cache_enabled(cache_enabled)
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device, prev_enabled)
        torch.set_autocast_dtype(device, prev_dtype)
        torch.set_autocast_cache_enabled(prev_cache)


def fake_supported(device: str) -> bool:
    return device != "cpu" and devices.has_autocast_kernels(device)


#: Why checks that build an autograd graph do not run under ``--fake``: the autograd
#: metadata of a tensor asks the device's guard implementation, which a build without
#: the device lacks (a CPU build aborts the whole process, it does not raise).
FAKE_AUTOGRAD = ("not applicable in --fake mode: autograd on fake {device} tensors needs the "
                 "device (the autograd engine asks for the device's guard implementation; a "
                 "build without it aborts the process)")


def fake_autograd_reason(target: Target) -> str | None:
    """The skip reason for a check that needs autograd, or None on a real device."""
    return FAKE_AUTOGRAD.format(device=target.device) if target.fake else None


#: what a fake device's missing runtime says: an op that calls into the absent device's
#: runtime, a kernel with no Meta implementation (a CUDA build without a GPU takes the
#: fused-cell path, which has none), or FakeTensorMode's own limit (a nested tensor it
#: makes on meta, seen on torch 2.6)
FAKE_RUNTIME = ("not compiled with", "not linked with support", "An unexpected device type",
                "no fake impl or Meta kernel registered", "Found no NVIDIA driver",
                "CUDA driver version is insufficient", "Unhandled FakeTensor Device Propagation")


def fake_runtime(target: Target, error: BaseException) -> bool:
    """Whether ``error`` is the fake device's missing runtime (torch's AcceleratorError
    included), not the call's own."""
    return target.fake and (type(error).__name__ == "AcceleratorError"
                            or any(text in str(error) for text in FAKE_RUNTIME))
