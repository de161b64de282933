"""The op lists cover the device's whole autocast policy.

Every overload the running torch registers for the device's ``Autocast<Device>`` key must
be entered by some op-list entry (observed, see amp_conformance.tools.coverage) or excluded
with a written reason; the failure names the overloads that are neither.
"""

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.tools import coverage

pytestmark = pytest.mark.amp_check("coverage")


def test_every_policy_overload_is_covered_or_excluded(amp_settings, amp_target):
    lists = load_oplist(amp_settings.device, amp_settings.oplists)
    if not coverage.policy_overloads(amp_settings.device):
        pytest.skip(f"torch registers no kernel for the {amp_target.device} autocast key: "
                    "there is no policy to cover")
    coverage.check(amp_settings.device, lists, amp_target, amp_settings.amp_dtypes)
