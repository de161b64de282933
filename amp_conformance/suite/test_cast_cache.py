"""The autocast cast cache: a parameter is cast once per outermost region, and only then."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from amp_conformance.checks import defects
from amp_conformance.checks.training import cache
from amp_conformance.core.probes import CastCounter, weight_and_input
from amp_conformance.core.state import unchanged_autocast_state

pytestmark = [pytest.mark.amp_needs_values, pytest.mark.amp_check("cast_cache")]


@pytest.mark.amp_needs("checkpoint")
def test_weight_cast_once_across_forward_and_backward(amp_target, amp_dtype):
    """A float32 leaf weight is cast once across a forward and a checkpointed backward
    that re-enters autocast inside the same outer region."""
    w, x = weight_and_input(amp_target.device)
    with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(w) as counter:
        with amp_target.autocast(amp_dtype):
            y = torch.mm(x, w)
            z = checkpoint(lambda a: torch.mm(a, w), x, use_reentrant=False)
            (y.float().sum() + z.float().sum()).backward()
    assert counter.count == 1, (
        f"weight cast {counter.count} times to {counter.casts} in one region; the cast cache "
        "should cast a float32 parameter once per outermost autocast region"
    )
    assert w.grad is not None and w.grad.dtype == torch.float32


def test_cache_disabled_casts_every_time(amp_target, amp_dtype):
    w, x = weight_and_input(amp_target.device)
    with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(w) as counter:
        with amp_target.autocast(amp_dtype, cache_enabled=False):
            assert not torch.is_autocast_cache_enabled(), "cache_enabled=False left the cache on"
            torch.mm(x, w)
            torch.mm(x, w)
    assert counter.count == 2, (
        f"with cache_enabled=False the weight was cast {counter.count} times, expected 2"
    )


def test_registered_cached_tensor_is_not_cached(amp_target, amp_dtype):
    """Tensors registered with torch._C._add_cached_tensor are left out of the cast cache."""
    w, x = weight_and_input(amp_target.device)
    previously = getattr(torch._C, "_is_cached_tensors_enabled", lambda: False)()
    torch._C._set_cached_tensors_enabled(True)
    torch._C._add_cached_tensor(w)
    try:
        with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(w) as counter:
            with amp_target.autocast(amp_dtype):
                torch.mm(x, w)
                torch.mm(x, w)
    finally:
        torch._C._remove_cached_tensor(w)
        torch._C._set_cached_tensors_enabled(previously)
    assert counter.count == 2, (
        f"a registered cached tensor was cast {counter.count} times, expected 2 (not cached)"
    )


def test_non_leaf_is_not_cached(amp_target, amp_dtype):
    w, x = weight_and_input(amp_target.device)
    v = w * 1
    with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(v) as counter:
        with amp_target.autocast(amp_dtype):
            torch.mm(x, v)
            torch.mm(x, v)
    assert counter.count == 2, f"a non-leaf tensor was cast {counter.count} times, expected 2 (not cached)"


def test_cache_survives_inner_region_exit(amp_target, amp_dtype):
    """Leaving a nested region does not clear the cache; only the outermost exit does."""
    w, x = weight_and_input(amp_target.device)
    with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(w) as counter:
        with amp_target.autocast(amp_dtype):
            torch.mm(x, w)
            with amp_target.autocast(amp_dtype):
                torch.mm(x, w)
            torch.mm(x, w)
    assert counter.count == 1, f"weight cast {counter.count} times across a nested region, expected 1"


def test_cache_cleared_when_outermost_region_exits(amp_target, amp_dtype):
    """A weight changed in place between two regions is seen changed in the second."""
    w, x = weight_and_input(amp_target.device)
    with unchanged_autocast_state(amp_target.device, "the check"), CastCounter(w) as counter:
        with amp_target.autocast(amp_dtype):
            first = torch.mm(x, w)
        with torch.no_grad():
            w.mul_(2)
        with amp_target.autocast(amp_dtype):
            second = torch.mm(x, w)
    assert counter.count == 2, f"weight cast {counter.count} times in two regions, expected 2 (cache cleared)"
    torch.testing.assert_close(
        second, first * 2, rtol=0, atol=0,
        msg="the second region used a stale cast of a weight changed in place between regions",
    )


def test_no_grad_does_not_poison_cache(amp_target, amp_dtype, record_property):
    """A no_grad pass inside autocast must not leave a cast without autograd history
    (on a torch that still has pytorch#158232, doing what it does is reported as
    reproducing that reference defect)."""
    with unchanged_autocast_state(amp_target.device, "the check"):
        defects.known_departure(cache.NO_GRAD_DEFECT,
                                lambda: cache.check_no_grad_pass(amp_target, amp_dtype),
                                cache.NO_GRAD_SYMPTOM, record_property)
