"""torch.amp.custom_fwd / custom_bwd, property-based (Hypothesis): what forward receives
and the autocast state forward and backward run in."""

import pytest

from amp_conformance.checks import fake_casts, profiles
from amp_conformance.checks.custom_fwd import check as custom_fwd

pytestmark = pytest.mark.amp_check("custom_fwd")


def test_cast_inputs(amp_target, amp_dtype):
    """cast_inputs casts the device's floating (not float64) tensors inside any nesting of
    lists, tuples and dicts, hands everything else over as the same object, and runs
    forward with autocast off; outside an enabled region it does nothing. Every generated
    payload holds tensors it must change beside float64, integer, other-device tensors,
    a numpy array and an opaque object, and is also passed outside an enabled region and
    without cast_inputs."""
    try:
        custom_fwd.check_cast_inputs_property(amp_target, amp_dtype, profiles.selected())
    except Exception as exc:
        limit = fake_casts.not_applicable(exc) if amp_target.fake else None
        if limit is None:
            raise
        pytest.skip(str(limit))


@pytest.mark.amp_needs("autograd")
def test_backward_runs_in_forward_state(amp_target):
    """custom_bwd runs backward with the autocast state and dtype of the forward, whatever
    region backward() is called from."""
    if amp_target.fake:
        pytest.skip("not applicable in --fake mode: custom_bwd re-enters torch.autocast on the "
                    "device, which refuses an absent device, and autograd needs real tensors")
    custom_fwd.check_backward_property(amp_target, profiles.selected())
