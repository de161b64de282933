"""The quarantine's fence (core/quarantine.py, core/dispatch.py) stops every call of a
quarantined op before it reaches the device, however the faulty kernel is registered: torch's
own C++ kernel, a per-op kernel registered from Python, a boxed fallback, a Python dispatch
mode; through a composite too; and release() brings the kernels back.

Each kind is a fault that "loses the device" (raises ``LOST``) at its kernel, counted, so a
test sees the fence stop the call before it, not merely an error after it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.core import quarantine

LOST = "FAULT: device lost"
A = torch.ones(2, 2)


@pytest.fixture(autouse=True)
def _released():
    yield
    quarantine.release()


class Fault:
    """A faulty kernel: counts its calls and loses the device."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        raise RuntimeError(LOST)


@contextlib.contextmanager
def python_kernel(fault: Fault) -> Iterator[tuple[str, Callable[[], object]]]:
    """A per-op kernel registered from Python over torch's own; reached through matmul."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
        lib.impl("mm", fault, "CPU")
    try:
        yield "mm", lambda: torch.matmul(A, A)
    finally:
        lib._destroy()


@contextlib.contextmanager
def boxed_fallback(fault: Fault) -> Iterator[tuple[str, Callable[[], object]]]:
    """A backend-wide fallback on the CPU key: reached by ops without a CPU kernel of their own."""
    lib = torch.library.Library("_", "IMPL", "CPU")
    lib.fallback(lambda *args, **kwargs: fault())
    x = A[None, None]
    try:
        yield "cudnn_convolution", lambda: torch.ops.aten.cudnn_convolution(
            x, x, [0, 0], [1, 1], [1, 1], 1, False, False, False)
    finally:
        lib._destroy()


@contextlib.contextmanager
def dispatch_mode(fault: Fault) -> Iterator[tuple[str, Callable[[], object]]]:
    """A backend that runs its ops in a Python dispatch mode."""

    class Backend(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.mm:
                fault()
            return func(*args, **(kwargs or {}))

    with Backend():
        yield "mm", lambda: torch.nn.functional.linear(A, A)


#: torch's own C++ kernels: test_a_guard_stops_every_call_of_its_op_and_is_removed_again
KINDS = {"python kernel": python_kernel, "boxed fallback": boxed_fallback,
         "dispatch mode": dispatch_mode}


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_fence_stops_the_call_before_the_faulty_kernel(kind):
    fault = Fault()
    with KINDS[kind](fault) as (op, call):
        with pytest.raises(RuntimeError, match=LOST):
            call()
        reached = fault.calls
        assert reached == 1
        assert quarantine.guard("cpu", f"aten::{op}")
        with quarantine.fenced():
            with pytest.raises(quarantine.Quarantined, match=f"aten::{op} is quarantined on cpu"):
                call()
            with torch.autocast("cpu"), pytest.raises(quarantine.Quarantined):
                call()
            assert torch.add(A, A).sum().item() == 8  # other ops run
        assert fault.calls == reached
        assert quarantine.touched() == [f"aten::{op}"]
        quarantine.release()
        with quarantine.fenced(), pytest.raises(RuntimeError, match=LOST):
            call()
        assert fault.calls == reached + 1


def test_the_fence_holds_for_calls_on_its_device_only():
    """A quarantined op on cuda leaves the suite's own cpu calls of it alone."""
    assert quarantine.guard("cuda", "aten::mm")
    with quarantine.fenced():
        assert torch.mm(A, A).sum().item() == 8
    assert quarantine.touched() == []
    assert quarantine._touches("cuda", ([A, A.to("meta")],), {}) is False
    assert quarantine._touches("cuda", (), {"device": "cuda:0"})
    assert quarantine._touches("cuda", (torch.device("cuda", 1),), {})


def test_a_guard_stops_every_call_of_its_op_and_is_removed_again():
    """Every overload of the op, with autocast on or off, raises Quarantined and is noted,
    also where torch lets the kernels be replaced and the item's thread is not the one
    calling; release() brings the kernels back."""
    try:
        assert quarantine.guard("cpu", "aten::mm.out")  # the op a probe's blame names
        assert not quarantine.guard("cpu", "aten::mm")  # already guarded
        with quarantine.fenced():
            with pytest.raises(quarantine.Quarantined, match="aten::mm is quarantined on cpu"):
                torch.mm(A, A)
            with pytest.raises(quarantine.Quarantined), torch.autocast("cpu"):
                torch.mm(A, A)
            with pytest.raises(quarantine.Quarantined):
                torch.mm(A, A, out=torch.empty(2, 2))
            assert torch.add(A, A).sum().item() == 8  # other ops run
        with pytest.raises(quarantine.Quarantined):  # torch's C++ kernel is replaced too
            torch.mm(A, A)
        assert quarantine.touched() == ["aten::mm"]
    finally:
        quarantine.release()
    assert torch.mm(A, A).sum().item() == 8 and quarantine.touched() == []
