"""The op lists cover the device's whole autocast policy.

Every overload the running torch registers for the device's ``Autocast<Device>`` key must
be checked by some op-list entry (entered, as observed, by a call whose policy check runs
in this mode and did not raise; see amp_conformance.checks.coverage.check) or excluded with a
written reason; the failure names the overloads that are neither, and those only reached
where nothing checks them.
"""

import warnings

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.checks.coverage import check as coverage
from amp_conformance.plugin.vendor import AmpConformanceWarning

pytestmark = pytest.mark.amp_check("coverage")


def test_every_policy_overload_is_covered_or_excluded(amp_settings, amp_target):
    lists = load_oplist(amp_settings.device, amp_settings.oplists)
    if not coverage.policy_overloads(amp_settings.device):
        pytest.skip(f"torch registers no kernel for the {amp_target.device} autocast key: "
                    "there is no policy to cover")
    report = coverage.check(amp_settings.device, lists, amp_target, amp_settings.amp_dtypes,
                            amp_settings.numerics)
    if report.foreign:  # said once, never a failure: no op list can call them
        warnings.warn(AmpConformanceWarning(
            f"{len(report.foreign)} {report.key} kernels no op list can check (python -m "
            "amp_conformance coverage lists them): " + "; ".join(
                f"{name}: {why}" for name, why in sorted(report.foreign.items()))), stacklevel=1)
