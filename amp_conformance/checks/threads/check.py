"""Autocast and threads: state is per thread, the cast cache is not.

- A new thread starts with autocast off, the device's default dtype and the cache on,
  whatever regions another thread has open; a region a thread enters is its own.
- The cast cache is global (pytorch#86136, fixed by making it one synchronized cache):
  leaving the outermost region, or ``torch.clear_autocast_cache()``, clears the casts of
  every thread, so a weight changed in place is seen changed by any thread afterwards.
- Backward ops run on autograd engine threads on devices that have them (cuda, xpu, ...):
  they must see the autocast state of the thread that called ``backward()``. A bfloat16
  ``index_put`` under autocast failed its backward when that thread fell back to the
  default float16 (pytorch#132715, upstream ``test_autocast_prioritize``). On cpu,
  backward runs on the calling thread, so there the check only shows the engine keeps
  the state; it still runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.core.compare import compare
from amp_conformance.core.devices import dtype_name
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.probes import probe, weight_and_input
from amp_conformance.core.state import nesting
from amp_conformance.core.target import Target

_TIMEOUT = 60.0


def _state(device: str) -> tuple:
    return (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device),
            torch.is_autocast_cache_enabled(), nesting())


def _state_text(state: tuple) -> str:
    enabled, dtype, cache, depth = state[:4]
    return f"(enabled={enabled}, dtype={dtype_name(dtype)}, cache_enabled={cache}, nesting={depth})"


class Worker:
    """A thread running ``body(worker)``; its result or exception is handed back on join."""

    def __init__(self, body: Callable[[Worker], Any], name: str):
        self.go, self.ready = threading.Event(), threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = body(self)
            except BaseException as exc:  # handed to the main thread
                self.error = exc
            finally:
                self.ready.set()

        self.thread = threading.Thread(target=run, name=f"amp-conformance-{name}", daemon=True)
        self.thread.start()

    def wait(self, event: threading.Event) -> None:
        if not event.wait(_TIMEOUT):
            raise ConformanceFailure(f"thread handshake timed out after {_TIMEOUT:.0f}s")

    def join(self) -> Any:
        self.go.set()
        self.thread.join(_TIMEOUT)
        if self.thread.is_alive():
            raise ConformanceFailure(f"{self.thread.name} did not finish in {_TIMEOUT:.0f}s")
        if self.error is not None:
            raise self.error
        return self.result


def check_new_thread_state(target: Target, dtype: torch.dtype, default: torch.dtype) -> None:
    """Inside a region here, a new thread sees autocast off; its own region leaves ours alone."""
    dev = target.device
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16

    def body(w: Worker) -> tuple:
        with target.tensors():
            fresh = (*_state(dev), probe(dev))
            with target.autocast(other):
                w.ready.set()  # main observes its own state while we are inside our region
                w.wait(w.go)
        return fresh

    with target.autocast(dtype, cache_enabled=False):
        mine = _state(dev)
        worker = Worker(body, "fresh-thread")
        worker.wait(worker.ready)
        during = _state(dev)
        fresh = worker.join()
    expected = (False, default, True, 0, torch.float32)
    if fresh != expected:
        raise ConformanceFailure(
            f"a new thread started while this one is inside torch.autocast({dev!r}, "
            f"dtype={dtype}, cache_enabled=False) saw {_state_text(fresh)} and torch.mm -> "
            f"{fresh[4]}; expected autocast off with the default dtype {_state_text(expected)} "
            "and float32: autocast state is per thread"
        )
    if during != mine:
        raise ConformanceFailure(
            f"while another thread was inside its own {dtype_name(other)} region on {dev}, this "
            f"thread's state changed from {_state_text(mine)} to {_state_text(during)}"
        )


def check_clear_reaches_other_threads(target: Target, dtype: torch.dtype, numerics: str) -> None:
    """A weight cached by a thread still inside its region is re-cast after another
    thread's outermost region ends and the weight changes in place (pytorch#86136)."""
    dev = target.device
    w, x = weight_and_input(dev)
    x = x.detach()

    def body(worker: Worker) -> tuple:
        with target.autocast(dtype):
            first = torch.mm(x, w).detach()
            worker.ready.set()
            worker.wait(worker.go)
            return first, torch.mm(x, w).detach()

    worker = Worker(body, "cache-holder")
    worker.wait(worker.ready)
    with target.autocast(dtype):  # this thread's outermost exit clears the cache
        torch.mm(x, w)
    with torch.no_grad():
        w.mul_(2)
    first, second = worker.join()
    compare(second, first * 2, numerics, None,
            f"{dev}, {dtype_name(dtype)}: a thread cast a weight inside its region; another "
            "thread's outermost region then ended (clearing the cast cache) and the weight was "
            "doubled in place; the first thread's next torch.mm used a stale cached cast "
            "(pytorch#86136: clearing the cache must reach every thread's casts)")


def check_ended_region_not_reused(target: Target, dtype: torch.dtype, numerics: str) -> None:
    """A weight cast in thread A, whose region then ended, is re-cast by thread B after
    it changed in place (pytorch#86136)."""
    dev = target.device
    w, x = weight_and_input(dev)
    x = x.detach()

    def cast_in_region(worker: Worker) -> torch.Tensor:
        with target.autocast(dtype):
            return torch.mm(x, w).detach()

    first = Worker(cast_in_region, "thread-a").join()
    with torch.no_grad():
        w.mul_(2)
    second = Worker(cast_in_region, "thread-b").join()
    compare(second, first * 2, numerics, None,
            f"{dev}, {dtype_name(dtype)}: thread A cast a weight in its region, which ended; "
            "the weight was doubled in place; thread B's torch.mm in its own region used A's "
            "stale cast (pytorch#86136)")


def check_backward_thread_state(target: Target, dtype: torch.dtype) -> None:
    """Backward of a bfloat16/float16 index_put under autocast runs, and backward functions
    see the autocast state of the thread that called backward() (pytorch#132715)."""
    dev = target.device
    seen: dict[str, Any] = {}

    class Recorder(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, t: torch.Tensor) -> torch.Tensor:
            return t * 2

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            seen["state"] = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
            seen["thread"] = threading.get_ident()
            return grad * 2

    g = torch.Generator().manual_seed(0)
    with target.autocast(dtype):
        t = torch.randn(3, 4, 5, generator=g).to(dtype).to(dev).requires_grad_()
        index = torch.randint(0, 3, (3, 4, 5), generator=g).to(dev)
        val = torch.randn(1, generator=g).to(dtype).to(dev)
        loss = Recorder.apply(torch.index_put(t, [index], val)).mean()
        try:
            loss.backward()
        except RuntimeError as exc:
            raise ConformanceFailure(
                f"backward of torch.index_put on {dtype_name(dtype)} tensors under "
                f"torch.autocast({dev!r}, dtype={dtype}) raised {exc} (pytorch#132715: the "
                "autograd thread ran the promote policy with another autocast dtype)"
            ) from None
    where = ("the calling thread" if seen.get("thread") == threading.get_ident()
             else "an autograd engine thread")
    if seen.get("state") != (True, dtype):
        raise ConformanceFailure(
            f"a backward function on {where} saw (enabled, dtype) = {seen.get('state')}, "
            f"expected {(True, dtype)}: backward() was called inside torch.autocast({dev!r}, "
            f"dtype={dtype}) (pytorch#132715)"
        )
    if t.grad is None or t.grad.dtype != dtype:
        raise ConformanceFailure(f"index_put backward on {dev}: grad dtype "
                                 f"{None if t.grad is None else t.grad.dtype}, expected {dtype}")
