"""The autocast cast cache: a parameter is cast once per outermost region, and only then
(the cast_cache family)."""

import pytest

from amp_conformance.checks import defects
from amp_conformance.checks.cache_interactions import check as cache
from amp_conformance.checks.cast_cache import check
from amp_conformance.core.state import unchanged_autocast_state

pytestmark = [pytest.mark.amp_needs_values, pytest.mark.amp_check("cast_cache")]


@pytest.mark.amp_needs("checkpoint")
def test_weight_cast_once_across_forward_and_backward(amp_target, amp_dtype):
    """A float32 leaf weight is cast once across a forward and a checkpointed backward
    that re-enters autocast inside the same outer region."""
    check.check_once_across_backward(amp_target, amp_dtype)


def test_cache_disabled_casts_every_time(amp_target, amp_dtype):
    check.check_disabled_casts_every_time(amp_target, amp_dtype)


def test_registered_cached_tensor_is_not_cached(amp_target, amp_dtype):
    """Tensors registered with torch._C._add_cached_tensor are left out of the cast cache."""
    check.check_registered_cached_tensor(amp_target, amp_dtype)


def test_non_leaf_is_not_cached(amp_target, amp_dtype):
    check.check_non_leaf_not_cached(amp_target, amp_dtype)


def test_cache_survives_inner_region_exit(amp_target, amp_dtype):
    """Leaving a nested region does not clear the cache; only the outermost exit does."""
    check.check_survives_inner_exit(amp_target, amp_dtype)


def test_cache_cleared_when_outermost_region_exits(amp_target, amp_dtype):
    """A weight changed in place between two regions is seen changed in the second."""
    check.check_cleared_at_outermost_exit(amp_target, amp_dtype)


def test_no_grad_does_not_poison_cache(amp_target, amp_dtype, record_property):
    """A no_grad pass inside autocast must not leave a cast without autograd history
    (on a torch that still has pytorch#158232, doing what it does is reported as
    reproducing that reference defect)."""
    with unchanged_autocast_state(amp_target.device, "the check"):
        defects.known_departure(cache.NO_GRAD_DEFECT,
                                lambda: cache.check_no_grad_pass(amp_target, amp_dtype),
                                cache.NO_GRAD_SYMPTOM, record_property)
