"""The cast cache against grad modes: inference_mode, no_grad/grad passes, retain_graph, leaks.

The cache keeps the cast of a float32 parameter for the rest of the outermost region. A
cast made where autograd is off must not come back without autograd history in a later
grad pass of the same region (pytorch#158232: outputs after a ``no_grad`` pass lost their
``grad_fn``; fixed by pytorch#165068, which some supported releases predate; fixed on
2.13), nor as an inference tensor after ``inference_mode`` ends; and many ``no_grad``
iterations must not pile up casts (upstream ``test_autocast_cache_leak``, pytorch#48049).
Upstream's device-generic tests: ``test_autocast_inference_mode_interaction``,
``test_autocast_mixed_grad_contexts``, ``test_autocast_caching_still_works_with_gradients``.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.core.compare import compare
from amp_conformance.core.devices import dtype_name
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.probes import weight_and_input
from amp_conformance.core.target import Target


class CastTracker(TorchDispatchMode):
    """Keeps a weak reference to every cast of one tensor, to count the casts still alive
    (the cache holds its cast in C++; the Python object lives as long as the tensor does)."""

    def __init__(self, tensor: torch.Tensor):
        super().__init__()
        self.tensor = tensor
        self.refs: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and args and args[0] is self.tensor:
            self.refs.append(weakref.ref(out))
        return out

    def alive(self, allowed: int = 0) -> int:
        """Casts still alive; a full ``gc.collect()`` (slow with torch loaded) only when
        more than ``allowed`` are, in case a reference cycle is all that holds them."""
        count = sum(ref() is not None for ref in self.refs)
        if count > allowed:
            gc.collect()
            count = sum(ref() is not None for ref in self.refs)
        return count


def _grad_pass(what: str, run: Any) -> Any:
    """Run a grad pass; a RuntimeError there (e.g. an inference tensor saved for backward)
    is a conformance failure naming the pass."""
    try:
        return run()
    except RuntimeError as exc:
        raise ConformanceFailure(f"{what} raised {type(exc).__name__}: {exc}") from None


#: the reference defect (oplists/defects.toml) of a cast cached under no_grad, and the
#: words by which a failure shows it
NO_GRAD_DEFECT = "cast-cache-no-grad"
NO_GRAD_SYMPTOM = "the cast cache handed back a cast made without autograd history"


def _expect_grad(out: torch.Tensor, what: str, cause: str = "pytorch#158232") -> None:
    if not out.requires_grad or out.grad_fn is None:
        raise ConformanceFailure(
            f"{what} has requires_grad={out.requires_grad}, grad_fn={out.grad_fn}: the cast "
            f"cache handed back a cast made without autograd history ({cause})"
        )


def check_no_grad_pass(target: Target, dtype: torch.dtype) -> None:
    """A no_grad pass inside a region, then a grad pass: the grad pass keeps its history
    and the weight gets a gradient (pytorch#158232)."""
    where = f"torch.autocast({target.device!r}, dtype={dtype})"
    w, x = weight_and_input(target.device)
    with target.autocast(dtype):
        with torch.no_grad():
            torch.mm(x, w)
        y = torch.mm(x, w)
    _expect_grad(y, f"torch.mm after a no_grad pass inside {where}")
    y.float().sum().backward()
    if w.grad is None:
        raise ConformanceFailure(f"no weight gradient after a no_grad pass inside {where}")


def _expect_no_grad(out: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    if out.requires_grad or out.dtype != dtype:
        raise ConformanceFailure(f"{what}: requires_grad={out.requires_grad}, dtype "
                                 f"{out.dtype}; expected no grad and {dtype}")


def single_pass_grad(target: Target, dtype: torch.dtype) -> torch.Tensor:
    """The weight's gradient of one clean ``mm(x, w).float().sum()`` pass under autocast."""
    w, x = weight_and_input(target.device)
    with target.autocast(dtype):
        torch.mm(x, w).float().sum().backward()
    return w.grad


def check_inference_mode(target: Target, dtype: torch.dtype) -> None:
    """inference_mode inside a region, then a grad pass in the same region; a region inside
    inference_mode (upstream test_autocast_inference_mode_interaction). The passes' history
    is checked before their dtypes: a device whose autograd does not reach its tensors fails
    the same way with autocast off (plugin/excuses.py), its dtypes would not."""
    dev, where = target.device, f"torch.autocast({target.device!r}, dtype={dtype})"
    w, x = weight_and_input(dev)
    with target.autocast(dtype):
        torch.clear_autocast_cache()
        with torch.inference_mode():
            first = torch.mm(x, w)
        out = _grad_pass(f"torch.mm after an inference_mode pass inside {where}",
                         lambda: torch.mm(x, w))
        _expect_grad(out, f"torch.mm after an inference_mode pass inside {where}",
                     "a cast cached under inference_mode")
        _grad_pass(f"backward after an inference_mode pass inside {where}",
                   lambda: out.float().sum().backward())
    if w.grad is None:
        raise ConformanceFailure(f"no weight gradient after an inference_mode pass inside {where}")
    with torch.inference_mode(), target.autocast(dtype):
        inner = torch.mm(x, w)
    _expect_no_grad(first, dtype, f"torch.mm under inference_mode inside {where}")
    _expect_no_grad(inner, dtype, f"torch.mm inside {where} inside inference_mode")
    if not inner.is_inference():
        raise ConformanceFailure(f"torch.mm inside {where} inside inference_mode is no "
                                 "inference tensor")


def check_mixed_grad_contexts(target: Target, dtype: torch.dtype, numerics: str) -> None:
    """no_grad, grad, no_grad, grad passes in one region: the grad passes keep their
    history and the gradient is twice one clean pass's (upstream
    test_autocast_mixed_grad_contexts; pytorch#158232)."""
    where = f"torch.autocast({target.device!r}, dtype={dtype})"
    expected = single_pass_grad(target, dtype) * 2
    w, x = weight_and_input(target.device)
    outs = []
    with target.autocast(dtype):
        for i in range(4):
            if i % 2 == 0:
                with torch.no_grad():
                    _expect_no_grad(torch.mm(x, w), dtype, f"pass {i + 1} (no_grad) in {where}")
            else:
                outs.append(torch.mm(x, w))
                _expect_grad(outs[-1], f"pass {i + 1} (grad, after a no_grad pass) in {where}")
        _grad_pass(f"backward of the grad passes in {where}",
                   lambda: (outs[0].float().sum() + outs[1].float().sum()).backward())
    compare(w.grad, expected, numerics, None,
            f"{target.device}, {dtype_name(dtype)}: weight grad of two grad passes between "
            "no_grad passes, against twice one clean pass's")


def check_retain_graph(target: Target, dtype: torch.dtype, numerics: str) -> None:
    """Three forward passes in one region, each backpropagated with retain_graph=True
    (the last without): every pass keeps its history and the weight gradient is three
    times one clean pass's (upstream test_autocast_caching_still_works_with_gradients)."""
    where = f"torch.autocast({target.device!r}, dtype={dtype})"
    expected = single_pass_grad(target, dtype) * 3
    w, x = weight_and_input(target.device)
    with target.autocast(dtype):
        outs = [torch.mm(x, w) for _ in range(3)]
        for i, out in enumerate(outs):
            _expect_grad(out, f"forward pass {i + 1} of 3 in {where}")
            _grad_pass(f"backward {i + 1} of 3 (retain_graph={i < 2}) in {where}",
                       lambda o=out, keep=i < 2: o.float().sum().backward(retain_graph=keep))
    compare(w.grad, expected, numerics, None,
            f"{target.device}, {dtype_name(dtype)}: weight grad of three passes backpropagated "
            "with retain_graph=True, against three times one clean pass's")


def check_no_grad_leak(target: Target, dtype: torch.dtype, iterations: int = 50) -> None:
    """Many no_grad passes in one region keep at most one cast of the weight alive, and
    none after the region ends (upstream test_autocast_cache_leak, pytorch#48049)."""
    where = f"torch.autocast({target.device!r}, dtype={dtype})"
    w, x = weight_and_input(target.device)
    x = x.detach()
    with CastTracker(w) as tracker:
        with target.autocast(dtype), torch.no_grad():
            for _ in range(iterations):
                torch.mm(x, w)
            inside = tracker.alive(allowed=1)
        after = tracker.alive()
    if inside > 1:
        raise ConformanceFailure(
            f"{iterations} no_grad passes of torch.mm inside {where} left {inside} casts of the "
            f"weight alive ({len(tracker.refs)} casts made); expected at most 1 (the cached "
            "one): the cast cache re-caches the same parameter (pytorch#48049)"
        )
    if after:
        raise ConformanceFailure(f"{after} casts of the weight are still alive after {where} "
                                 "ended: the outermost exit did not release the cast cache")
