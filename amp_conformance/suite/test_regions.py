"""Autocast regions: nesting, enabled=False subregions, another dtype inside, defaults (the
regions family; its state machine runs in test_properties.py)."""

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.checks.regions import check

pytestmark = pytest.mark.amp_check("regions")


def test_region_sets_and_restores_state(amp_target, amp_dtype):
    check.check_sets_and_restores(amp_target, amp_dtype)


def test_disabled_subregion_restores_outer(amp_target, amp_dtype):
    check.check_disabled_subregion(amp_target, amp_dtype)


def test_other_dtype_subregion_restores_outer(amp_target, amp_dtype):
    check.check_other_dtype_subregion(amp_target, amp_dtype)


def test_cache_flag_restored_after_subregion(amp_target, amp_dtype):
    check.check_cache_flag_restored(amp_target, amp_dtype)


def test_state_restored_when_body_raises(amp_target, amp_dtype):
    check.check_restored_when_body_raises(amp_target, amp_dtype)


def test_decorator_form(amp_target, amp_dtype):
    check.check_decorator_form(amp_target, amp_dtype)


def test_default_autocast_dtype(amp_settings, amp_target, amp_dtype):
    """torch.get_autocast_dtype and torch.autocast(device) without dtype use the device default."""
    recorded = load_oplist(amp_target.device, amp_settings.oplists).default_amp_dtype
    check.check_default_dtype(amp_target, recorded)
