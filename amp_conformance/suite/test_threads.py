"""Autocast and threads: per-thread state, a cast cache cleared for every thread, and the
autocast state of autograd's backward threads."""

import pytest
import torch

from amp_conformance.checks.threads import check as threads
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import fake_autograd_reason
from amp_conformance.plugin.parametrize import load_oplist

#: every check here runs the device in a thread of its own
pytestmark = [pytest.mark.amp_check("threads"), pytest.mark.amp_needs("threads")]

_FAKE_CACHE = ("not applicable in --fake mode: the cast cache holds only casts of tensors that "
               "require grad, and autograd on fake {device} tensors needs the device")


def test_new_thread_starts_clean(amp_target, amp_settings, amp_dtype):
    """A new thread starts with autocast off, the default dtype and the cache on, whatever
    region this thread is in; the region it enters leaves this thread's state alone."""
    recorded = load_oplist(amp_target.device, amp_settings.oplists).default_amp_dtype
    if recorded is None:
        pytest.skip(f"not applicable: no op list records the default autocast dtype of "
                    f"{amp_target.device}")
    with unchanged_autocast_state(amp_target.device, "the check"):
        threads.check_new_thread_state(amp_target, amp_dtype, getattr(torch, recorded))


def test_clear_reaches_other_threads(amp_target, amp_settings, amp_dtype):
    """Leaving the outermost region clears the casts another thread made (pytorch#86136)."""
    if amp_target.fake:
        pytest.skip(_FAKE_CACHE.format(device=amp_target.device))
    with unchanged_autocast_state(amp_target.device, "the check"):
        threads.check_clear_reaches_other_threads(amp_target, amp_dtype, amp_settings.numerics)


def test_ended_region_cast_not_reused(amp_target, amp_settings, amp_dtype):
    """A cast made in a thread whose region ended is not reused by another thread after the
    weight changed in place (pytorch#86136)."""
    if amp_target.fake:
        pytest.skip(_FAKE_CACHE.format(device=amp_target.device))
    with unchanged_autocast_state(amp_target.device, "the check"):
        threads.check_ended_region_not_reused(amp_target, amp_dtype, amp_settings.numerics)


@pytest.mark.amp_needs("autograd")
def test_backward_sees_callers_state(amp_target, amp_dtype):
    """Backward functions see the autocast state of the thread that called backward(); an
    index_put of amp-dtype tensors backpropagates under autocast (pytorch#132715, upstream
    test_autocast_prioritize). Devices whose backward runs on autograd engine threads
    (cuda, xpu, ...) check the state reaches those threads; on cpu backward runs on the
    calling thread, so it checks the engine leaves the state alone."""
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    with unchanged_autocast_state(amp_target.device, "the check"):
        threads.check_backward_thread_state(amp_target, amp_dtype)
