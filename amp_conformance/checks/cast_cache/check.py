"""The autocast cast cache: a float32 leaf parameter is cast once per outermost region, and
only then. Each check counts the casts of the weight (``core.probes.CastCounter``) and
raises :class:`ConformanceFailure` saying how many there were."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from amp_conformance.core.compare import close
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.probes import CastCounter, weight_and_input
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceFailure(message)


def check_once_across_backward(target: Target, amp_dtype: torch.dtype) -> None:
    """A float32 leaf weight is cast once across a forward and a checkpointed backward
    that re-enters autocast inside the same outer region."""
    w, x = weight_and_input(target.device)
    with unchanged_autocast_state(target.device, "the check"), CastCounter(w) as counter:
        with target.autocast(amp_dtype):
            y = torch.mm(x, w)
            z = checkpoint(lambda a: torch.mm(a, w), x, use_reentrant=False)
            (y.float().sum() + z.float().sum()).backward()
    _require(counter.count == 1,
             f"weight cast {counter.count} times to {counter.casts} in one region; the cast "
             "cache should cast a float32 parameter once per outermost autocast region")
    _require(w.grad is not None and w.grad.dtype == torch.float32,
             f"the weight's gradient is {None if w.grad is None else w.grad.dtype}, expected "
             "torch.float32")


def check_disabled_casts_every_time(target: Target, amp_dtype: torch.dtype) -> None:
    w, x = weight_and_input(target.device)
    with unchanged_autocast_state(target.device, "the check"), CastCounter(w) as counter:
        with target.autocast(amp_dtype, cache_enabled=False):
            _require(not torch.is_autocast_cache_enabled(), "cache_enabled=False left the cache on")
            torch.mm(x, w)
            torch.mm(x, w)
    _require(counter.count == 2,
             f"with cache_enabled=False the weight was cast {counter.count} times, expected 2")


def check_registered_cached_tensor(target: Target, amp_dtype: torch.dtype) -> None:
    """Tensors registered with torch._C._add_cached_tensor are left out of the cast cache."""
    w, x = weight_and_input(target.device)
    previously = getattr(torch._C, "_is_cached_tensors_enabled", lambda: False)()
    torch._C._set_cached_tensors_enabled(True)
    torch._C._add_cached_tensor(w)
    try:
        with unchanged_autocast_state(target.device, "the check"), CastCounter(w) as counter:
            with target.autocast(amp_dtype):
                torch.mm(x, w)
                torch.mm(x, w)
    finally:
        torch._C._remove_cached_tensor(w)
        torch._C._set_cached_tensors_enabled(previously)
    _require(counter.count == 2, f"a registered cached tensor was cast {counter.count} times, "
                                 "expected 2 (not cached)")


def check_non_leaf_not_cached(target: Target, amp_dtype: torch.dtype) -> None:
    w, x = weight_and_input(target.device)
    v = w * 1
    with unchanged_autocast_state(target.device, "the check"), CastCounter(v) as counter:
        with target.autocast(amp_dtype):
            torch.mm(x, v)
            torch.mm(x, v)
    _require(counter.count == 2,
             f"a non-leaf tensor was cast {counter.count} times, expected 2 (not cached)")


def check_survives_inner_exit(target: Target, amp_dtype: torch.dtype) -> None:
    """Leaving a nested region does not clear the cache; only the outermost exit does."""
    w, x = weight_and_input(target.device)
    with unchanged_autocast_state(target.device, "the check"), CastCounter(w) as counter:
        with target.autocast(amp_dtype):
            torch.mm(x, w)
            with target.autocast(amp_dtype):
                torch.mm(x, w)
            torch.mm(x, w)
    _require(counter.count == 1,
             f"weight cast {counter.count} times across a nested region, expected 1")


def check_cleared_at_outermost_exit(target: Target, amp_dtype: torch.dtype) -> None:
    """A weight changed in place between two regions is seen changed in the second."""
    w, x = weight_and_input(target.device)
    with unchanged_autocast_state(target.device, "the check"), CastCounter(w) as counter:
        with target.autocast(amp_dtype):
            first = torch.mm(x, w)
        with torch.no_grad():
            w.mul_(2)
        with target.autocast(amp_dtype):
            second = torch.mm(x, w)
    _require(counter.count == 2,
             f"weight cast {counter.count} times in two regions, expected 2 (cache cleared)")
    said = close(second, first * 2, rtol=0, atol=0)
    if said is not None:
        raise ConformanceFailure("the second region used a stale cast of a weight changed in "
                                 f"place between regions:\n{said}")
