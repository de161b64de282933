"""Property-based conformance (Hypothesis): the autocast region stack, and the eligibility
rule of the cast policies over generated shapes, dtypes, devices and values.

How many examples run is the profile's choice: ``--amp-hypothesis-profile ci`` (default:
derandomized and quick), ``dev`` or ``nightly``. A failure prints the shrunk example and
equivalent Python code that reproduces it. ``--hypothesis-show-statistics`` prints what
each item's examples exercised (``amp_conformance.properties.statistics``).
"""

import pytest

from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.properties import (
    policy as policy_properties,
)
from amp_conformance.properties import (
    profiles,
    regions,
)

pytestmark = pytest.mark.amp_check("properties")

POLICIES = list(policy_properties.POLICIES)


def test_regions_stack(amp_target):
    """Entering, leaving, decorating, raising, disabling, threads: after every step the
    autocast state and a probe op agree with a model of the open regions as a stack."""
    with unchanged_autocast_state(amp_target.device, "the regions state machine"):
        regions.run_regions_machine(amp_target, profiles.selected())


def _require_candidates(amp_settings, amp_target, amp_dtype, policy):
    found = policy_properties.candidates(
        amp_target, amp_dtype, policy, amp_settings.oplists, amp_settings.numerics
    )
    if not found:
        pytest.skip(f"not applicable: no op of the {policy} policy in the {amp_target.device} "
                    "op lists that the property knows how to call (policy_properties.FORMS)")


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_casts_only_eligible_inputs(amp_settings, amp_target, amp_dtype, policy):
    """Under autocast an op of the policy behaves like the op with autocast off on inputs
    cast by hand (only floating, non-float64 tensors of the device): same outcome, output
    dtypes, shapes and devices; all-eligible inputs give the policy's dtype; no ineligible
    input is converted. Each example calls the op with every input eligible, with a
    float64/integer/bool input beside eligible ones, and mixing devices (a tensor of the
    device first, so its Autocast kernel is entered, beside another device's tensors)."""
    _require_candidates(amp_settings, amp_target, amp_dtype, policy)
    policy_properties.check_policy_property(
        amp_target, amp_dtype, policy, profiles.selected(), values=False,
        numerics=amp_settings.numerics, oplists=amp_settings.oplists,
    )


@pytest.mark.amp_needs_values
@pytest.mark.parametrize("policy", POLICIES)
def test_policy_equals_hand_cast_control(amp_settings, amp_target, amp_dtype, policy):
    """The values too: the autocast output equals the hand-cast control (bitwise by
    default, within tolerance with --numerics close)."""
    _require_candidates(amp_settings, amp_target, amp_dtype, policy)
    policy_properties.check_policy_property(
        amp_target, amp_dtype, policy, profiles.selected(), values=True,
        numerics=amp_settings.numerics, oplists=amp_settings.oplists,
    )
