"""The wrapper tier (logic in amp_conformance.checks.wrappers): the autocast wrappers a
library ships, declared with ``--wrapper MODULE:NAME`` or the hook
``pytest_amp_conformance_wrappers``, held to their declaration and to autocast's contract.

Collected only where a declared wrapper of the function's kind claims the run's device (the
tier's seam, ``checks/wrappers/tier.py``): the default run has no item of it.

- ``test_wrapper_region``: a RegionFactory, per precision name (state, restored, nesting,
  decorator, cache, policy, nest, reuse, threads, cache_mix, devices) and once per wrapper
  (float32, unknown).
- ``test_wrapper_runner``: a RegionRunner, per precision name (state, restored, nesting,
  devices).
- ``test_wrapper_forward``: a ForwardDecorator (casts or uncast, inside, kwargs, backward,
  outside, eligible, after, grad, devices).
- ``test_wrapper_island``: a Float32Island, per amp dtype (float32, restored, nesting, grad,
  numerics, devices).
- ``test_wrapper_swap``: a RegionSwap, per amp dtype (state, restored, nesting, outside,
  devices).
- ``test_wrapper_predicate``: a Predicate, per amp dtype (state, nesting, devices).
- ``test_wrapper_scaler``: a Scaler (scales, skips, unscale, state_dict).
"""

from collections.abc import Callable

import pytest

from amp_conformance.checks.wrappers import (
    fake_device,
    forward,
    forward_contract,
    island,
    nesting,
    other_devices,
    predicate,
    region,
    runner,
    scaling,
    swap,
)
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.core.errors import NotApplicable
from amp_conformance.core.target import Target

pytestmark = pytest.mark.amp_check("wrappers")


REGION = {"state": region.check_state, "restored": region.check_restored,
          "nesting": region.check_nesting, "decorator": region.check_decorator,
          "cache": region.check_cache, "float32": region.check_float32,
          "unknown": region.check_unknown, "nest": nesting.check_nest,
          "reuse": nesting.check_reuse, "threads": nesting.check_threads,
          "cache_mix": nesting.check_cache_mix, "devices": other_devices.check_devices}
FORWARD = {"casts": forward.check_casts, "uncast": forward.check_uncast,
           "inside": forward.check_inside, "kwargs": forward.check_kwargs,
           "backward": forward.check_backward, "outside": forward_contract.check_outside,
           "eligible": forward_contract.check_eligible, "after": forward_contract.check_after,
           "grad": forward_contract.check_grad, "devices": other_devices.check_devices}
RUNNER = {"state": runner.check_state, "restored": runner.check_restored,
          "nesting": runner.check_nesting, "devices": other_devices.check_devices}
ISLAND = {"float32": island.check_float32, "restored": island.check_restored,
          "nesting": island.check_nesting, "grad": island.check_grad,
          "numerics": island.check_numerics, "devices": other_devices.check_devices}
SWAP = {"state": swap.check_state, "restored": swap.check_restored,
        "nesting": swap.check_nesting, "outside": swap.check_outside,
        "devices": other_devices.check_devices}
PREDICATE = {"state": predicate.check_state, "nesting": predicate.check_nesting,
             "devices": other_devices.check_devices}
SCALER = {"scales": scaling.check_scales, "skips": scaling.check_skips,
          "unscale": scaling.check_unscale, "state_dict": scaling.check_state_dict}


def _on_device(case: WrapperCase, check: Callable[[], object]) -> object:
    """The check on its device; a fake one made to behave like it, what it cannot do
    skipped with why."""
    try:
        with fake_device.on_device(Target(case.device, case.fake)):
            return check()
    except NotApplicable as exc:
        pytest.skip(str(exc))


def test_wrapper_region(amp_wrapper_case: WrapperCase, amp_settings, record_property):
    """The region factory keeps the promise the id's last part names."""
    if amp_wrapper_case.check == "policy":
        checked = _on_device(amp_wrapper_case, lambda: region.check_policy(
            amp_wrapper_case, amp_settings.oplists, amp_settings.numerics))
        if not checked:
            pytest.skip(f"not applicable: no op-list entry of {amp_wrapper_case.device} "
                        "applies to this dtype")
        record_property("amp_wrapper_entries", checked)
        return
    _on_device(amp_wrapper_case, lambda: REGION[amp_wrapper_case.check](amp_wrapper_case))


def test_wrapper_runner(amp_wrapper_case: WrapperCase):
    """The region runner keeps the promise the id's last part names."""
    _on_device(amp_wrapper_case, lambda: RUNNER[amp_wrapper_case.check](amp_wrapper_case))


def test_wrapper_forward(amp_wrapper_case: WrapperCase):
    """The forward decorator keeps the promise the id's last part names (its backward state
    on a fake device with host tensors carrying the graph)."""
    case = amp_wrapper_case
    if case.check == "backward":
        with fake_device.on_host(Target(case.device, case.fake)):
            forward.check_backward(case)
        return
    _on_device(case, lambda: FORWARD[case.check](case))


def test_wrapper_island(amp_wrapper_case: WrapperCase):
    """The float32 island keeps the promise the id's last part names (skipped with why
    where it does not apply)."""
    _on_device(amp_wrapper_case, lambda: ISLAND[amp_wrapper_case.check](amp_wrapper_case))


def test_wrapper_swap(amp_wrapper_case: WrapperCase):
    """The region swap keeps the promise the id's last part names."""
    _on_device(amp_wrapper_case, lambda: SWAP[amp_wrapper_case.check](amp_wrapper_case))


def test_wrapper_predicate(amp_wrapper_case: WrapperCase):
    """The predicate keeps the promise the id's last part names."""
    _on_device(amp_wrapper_case, lambda: PREDICATE[amp_wrapper_case.check](amp_wrapper_case))


def test_wrapper_scaler(amp_wrapper_case: WrapperCase):
    """The scaler keeps the promise the id's last part names (on a fake device only what
    needs no values nor autograd: the rest is skipped with why)."""
    _on_device(amp_wrapper_case, lambda: SCALER[amp_wrapper_case.check](amp_wrapper_case))
