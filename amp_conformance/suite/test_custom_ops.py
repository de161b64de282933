"""A custom op's autocast rule on the device under test (the custom_ops family): one item per
amp dtype and registration route (``register_autocast``, ``CustomOpDef.register_autocast``,
``register_autocast.library_op``, ``Library.impl``), forward and backward."""

import pytest

from amp_conformance.checks import fake_casts
from amp_conformance.checks.custom_ops import check, ops
from amp_conformance.core.target import fake_autograd_reason

pytestmark = pytest.mark.amp_check("custom_ops")

ROUTES = pytest.mark.parametrize("route", ops.ROUTES, ids=[r.name for r in ops.ROUTES])


@ROUTES
def test_custom_op_autocast(amp_settings, amp_target, amp_dtype, route):
    """Inside a region the op receives its rule's dtypes (only eligible tensors cast) and
    returns the cast dtype, equal to the op called with autocast off on inputs cast by hand
    (dtypes only under --fake); a refused registration fails quoting torch's message, unless
    the running torch predates the route for the device (skipped, the refusal quoted)."""
    try:
        check.check_forward(amp_target, route, amp_dtype, amp_settings.numerics)
    except ops.Unavailable as exc:
        pytest.skip(str(exc))
    except Exception as exc:
        limit = fake_casts.not_applicable(exc) if amp_target.fake else None
        if limit is None:
            raise
        pytest.skip(str(limit))


@ROUTES
@pytest.mark.amp_needs("autograd")
def test_custom_op_backward(amp_settings, amp_target, amp_dtype, route):
    """Backward outside the region gives each input its gradient, in its dtype, equal to
    the hand-cast control's."""
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    try:
        check.check_backward(amp_target, route, amp_dtype, amp_settings.numerics)
    except ops.Unavailable as exc:
        pytest.skip(str(exc))
