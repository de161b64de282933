"""Per-entry checks of the op lists: one item per (device, autocast dtype, entry)."""

import pytest

from amp_conformance.checks import backward, oplist_checks


@pytest.mark.amp_check("policy")
def test_policy(amp_case, record_property):
    """Inside autocast each variant gives the expected dtype and the variants agree;
    a banned op raises its documented error inside and runs outside."""
    observed = {}
    try:
        oplist_checks.check_policy(amp_case, observed)
    finally:
        record_property("amp_observed", observed)


@pytest.mark.amp_check("numerics")
def test_numerics(amp_case):
    """The autocast output equals a control computed with autocast disabled on inputs
    cast by hand to the policy's dtype (bitwise, or close with --numerics close)."""
    oplist_checks.check_numerics(amp_case)


@pytest.mark.amp_check("outside")
def test_outside(amp_case):
    """Outside autocast the same call runs in its input dtypes, untouched."""
    oplist_checks.check_outside(amp_case)


@pytest.mark.amp_check("legacy")
def test_legacy(amp_case):
    """The legacy torch.<device>.amp.autocast gives torch.autocast's result and warns."""
    oplist_checks.check_legacy(amp_case)


@pytest.mark.amp_check("backward")
def test_backward(amp_case):
    """Backward after an autocast region gives every float32 input a gradient in its dtype,
    equal to the one through the hand-cast control (bitwise, or close)."""
    backward.check_backward(amp_case)
