"""Higher-order ops under autocast (logic in amp_conformance.checks.higher_order_ops).

``test_higher_order_op``: one item per backend (uncompiled; aot_eager; the ``--amp-compile``
backend) and HOP, inside a region of the run's first amp dtype whose subgraphs open one of
the other: the HOP gives what the same computation gives without it.
``test_every_higher_order_op_is_covered``: every HOP of the running torch is run here or
declared internal.
"""

import pytest

from amp_conformance.checks.higher_order_ops import check
from amp_conformance.core.errors import NotApplicable

pytestmark = pytest.mark.amp_check("higher_order_ops")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """No item may reuse another's graphs or guards."""
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_higher_order_op(amp_settings, amp_target, amp_device, hop_backend, hop,
                         record_property):
    """Dtypes, values and errors of the computation without the HOP; regions inside kept."""
    reason = check.not_applicable(hop, amp_target, hop_backend)
    if reason:
        pytest.skip(reason)
    try:
        check.check(hop, amp_target, amp_settings.amp_dtypes[0], hop_backend,
                    amp_settings.numerics, record_property)
    except NotApplicable as exc:
        pytest.skip(str(exc))


def test_every_higher_order_op_is_covered(amp_device):
    """A HOP the running torch registers is run above, or declared internal with why."""
    check.check_coverage()
