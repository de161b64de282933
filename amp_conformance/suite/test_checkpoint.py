"""Activation checkpointing under autocast (torch.utils.checkpoint), backward outside the region."""

import pytest

from amp_conformance.checks.checkpoint import check as checkpointing
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import fake_autograd_reason

pytestmark = [pytest.mark.amp_check("checkpoint"), pytest.mark.amp_needs("autograd")]


@pytest.mark.parametrize("cache_enabled", [True, False], ids=["cache_on", "cache_off"])
@pytest.mark.parametrize("variant", list(checkpointing.VARIANTS))
def test_recompute_in_forward_state(amp_target, amp_dtype, amp_settings, variant, cache_enabled):
    """Reentrant, non-reentrant and sequential checkpointing recompute in the forward's
    autocast state (pytorch#71124) and match the un-checkpointed outputs and gradients."""
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    with unchanged_autocast_state(amp_target.device, "the check"):
        checkpointing.check_checkpoint(amp_target, amp_dtype, variant, cache_enabled,
                                       amp_settings.numerics)
