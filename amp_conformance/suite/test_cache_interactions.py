"""The cast cache against grad modes: inference_mode, no_grad/grad passes, retain_graph, leaks.

Where a check meets PyTorch's own cast-cache bug pytorch#158232 (casts cached under no_grad
came back without autograd history), a torch that still has it is reported as reproducing
the reference defect ``cast-cache-no-grad`` (oplists/defects.toml), not as failing."""

import pytest

from amp_conformance.checks import defects
from amp_conformance.checks.cache_interactions import check as cache
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import fake_autograd_reason

pytestmark = pytest.mark.amp_check("cache_interactions")


@pytest.fixture
def real_target(amp_target):
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    with unchanged_autocast_state(amp_target.device, "the check"):
        yield amp_target


@pytest.mark.amp_needs("autograd")
def test_inference_mode_interaction(real_target, amp_dtype, record_property):
    """inference_mode inside a region, a grad pass after it; a region inside inference_mode."""
    defects.known_departure(cache.NO_GRAD_DEFECT,
                            lambda: cache.check_inference_mode(real_target, amp_dtype),
                            cache.NO_GRAD_SYMPTOM, record_property)


@pytest.mark.amp_needs("autograd")
def test_mixed_grad_contexts(real_target, amp_dtype, amp_settings, record_property):
    """Alternating no_grad and grad passes in one region (pytorch#158232)."""
    defects.known_departure(
        cache.NO_GRAD_DEFECT,
        lambda: cache.check_mixed_grad_contexts(real_target, amp_dtype, amp_settings.numerics),
        cache.NO_GRAD_SYMPTOM, record_property)


@pytest.mark.amp_needs("autograd")
def test_retain_graph_passes(real_target, amp_dtype, amp_settings):
    """Repeated passes backpropagated with retain_graph=True in one region."""
    cache.check_retain_graph(real_target, amp_dtype, amp_settings.numerics)


def test_no_grad_iterations_do_not_leak(real_target, amp_dtype):
    """50 no_grad passes keep at most one cast of a parameter alive (pytorch#48049)."""
    cache.check_no_grad_leak(real_target, amp_dtype)
