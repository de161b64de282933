"""The wrapper tier (logic in amp_conformance.checks.wrappers): the autocast wrappers a
library ships, declared with ``--wrapper MODULE:NAME`` or the hook
``pytest_amp_conformance_wrappers``, held to their declaration and to autocast's contract.

Collected only where a declared wrapper claims the run's device (the plugin's
``pytest_ignore_collect``): the default run has no item of it.

- ``test_wrapper_region``: a RegionFactory, per precision name (state, restored, nesting,
  decorator, cache, policy, nest, reuse, threads, cache_mix) and once per wrapper (float32,
  unknown).
- ``test_wrapper_forward``: a ForwardDecorator (casts or uncast, inside, kwargs, backward,
  outside, eligible, after, grad).
"""

import pytest

from amp_conformance.checks.wrappers import forward, forward_contract, nesting, region
from amp_conformance.checks.wrappers.cases import WrapperCase, cases, not_applicable
from amp_conformance.plugin import vendor
from amp_conformance.plugin.session_settings import settings

pytestmark = pytest.mark.amp_check("wrappers")

FIXTURE = "amp_wrapper_case"
_KIND = {"test_wrapper_region": "region", "test_wrapper_forward": "forward"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if FIXTURE not in metafunc.fixturenames:
        return
    s = settings(metafunc.config)
    cache = vendor.declarations(metafunc.config).capabilities.cast_cache
    params = []
    for case in cases(s.wrappers, s.device, s.amp_dtypes):
        if case.kind != _KIND[metafunc.definition.originalname]:
            continue
        reason = not_applicable(case, s.amp_dtypes, s.fake, cache)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    metafunc.parametrize(FIXTURE, params)


REGION = {"state": region.check_state, "restored": region.check_restored,
          "nesting": region.check_nesting, "decorator": region.check_decorator,
          "cache": region.check_cache, "float32": region.check_float32,
          "unknown": region.check_unknown, "nest": nesting.check_nest,
          "reuse": nesting.check_reuse, "threads": nesting.check_threads,
          "cache_mix": nesting.check_cache_mix}
FORWARD = {"casts": forward.check_casts, "uncast": forward.check_uncast,
           "inside": forward.check_inside, "kwargs": forward.check_kwargs,
           "backward": forward.check_backward, "outside": forward_contract.check_outside,
           "eligible": forward_contract.check_eligible, "after": forward_contract.check_after,
           "grad": forward_contract.check_grad}


def test_wrapper_region(amp_wrapper_case: WrapperCase, amp_settings, record_property):
    """The region factory keeps the promise the id's last part names."""
    if amp_wrapper_case.check == "policy":
        checked = region.check_policy(amp_wrapper_case, amp_settings.oplists,
                                      amp_settings.numerics)
        if not checked:
            pytest.skip(f"not applicable: no op-list entry of {amp_wrapper_case.device} "
                        "applies to this dtype")
        record_property("amp_wrapper_entries", checked)
        return
    REGION[amp_wrapper_case.check](amp_wrapper_case)


def test_wrapper_forward(amp_wrapper_case: WrapperCase):
    """The forward decorator keeps the promise the id's last part names."""
    FORWARD[amp_wrapper_case.check](amp_wrapper_case)
