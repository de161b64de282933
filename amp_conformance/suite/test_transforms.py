"""Autocast under torch.func transforms: the policy inside ``vmap``, ``grad``, ``jacrev``
and ``functional_call`` is the policy outside them, forward and backward.
Logic: :mod:`amp_conformance.checks.transforms`."""

import pytest

from amp_conformance.checks.transforms import check as transforms

pytestmark = pytest.mark.amp_check("transforms")


def test_transform(amp_settings, amp_target, amp_device, transform, category, record_property):
    """Every entry of the op list, transformed and not, under the device's first amp dtype:
    same output dtypes and values; an entry the transform cannot run without autocast
    either is a limit, one PyTorch itself departs on may do either (recorded)."""
    transforms.check_transform(amp_target, amp_settings.amp_dtypes[0], transform, category,
                               amp_settings.oplists, amp_settings.numerics, record_property)


@pytest.mark.amp_needs("autograd")
def test_functional_call(amp_target, amp_dtype, record_property):
    """functional_call of a small module and torch.func.grad through it."""
    transforms.check_functional_call(amp_target, amp_dtype, record_property)
