"""Error paths of torch.autocast: bad device, bad dtype, bad decorator use, absent device
(the errors family)."""

import pytest

from amp_conformance.checks.errors import check

pytestmark = pytest.mark.amp_check("errors")


def test_invalid_device_string():
    check.check_invalid_device_string()


def test_is_autocast_available_rejects_invalid_device():
    check.check_is_autocast_available_rejects_invalid_device()


def test_non_string_device_type(amp_target):
    check.check_non_string_device_type(amp_target)


def test_decorator_rejects_non_callable(amp_target):
    check.check_decorator_rejects_non_callable(amp_target)


def test_unsupported_dtype_warns_and_disables(amp_target):
    """float64 is no autocast dtype: torch.autocast warns and runs with autocast off."""
    check.check_unsupported_dtype_warns_and_disables(amp_target)


def test_unavailable_cuda_warns_and_disables():
    """torch.autocast('cuda') where CUDA is absent warns and leaves autocast off."""
    check.check_unavailable_cuda_warns_and_disables()


def test_cuda_bfloat16_unsupported_raises(amp_target):
    """torch.autocast('cuda', dtype=torch.bfloat16) raises where the GPU lacks bfloat16."""
    check.check_cuda_bfloat16_unsupported_raises(amp_target)
