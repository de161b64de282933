"""Autocast casts only eligible tensors: floating, not float64, on the autocast device
(the eligibility family)."""

import pytest

from amp_conformance.checks.eligibility import check

pytestmark = pytest.mark.amp_check("eligibility")


def test_float64_is_not_cast(amp_target, amp_dtype):
    check.check_float64_not_cast(amp_target, amp_dtype)


def test_float32_is_cast(amp_target, amp_dtype):
    """The counterpart: the same call on float32 inputs is cast, so the probes can fail."""
    check.check_float32_cast(amp_target, amp_dtype)


def test_integer_is_not_cast(amp_target, amp_dtype):
    check.check_integer_not_cast(amp_target, amp_dtype)


def test_other_device_is_not_cast(amp_target, amp_dtype):
    """A tensor of another device in the same call is never cast."""
    check.check_other_device_not_cast(amp_target, amp_dtype)
