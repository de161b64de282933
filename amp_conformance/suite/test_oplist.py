"""Per-entry checks of the op lists: one item per (device, autocast dtype, entry).

An entry that meets one of PyTorch's own defects (``reference_defect``) passes when the
device does what the contract says or what PyTorch does today; the item records which
(``amp_conformance.checks.defects``). Under --fake, an op this torch cannot run on fake
tensors of the device (no fake kernel, and no cast that shows the answer instead) is
skipped with why."""

import contextlib

import pytest

from amp_conformance.checks import defects
from amp_conformance.checks.backward import check as backward
from amp_conformance.checks.fake_casts import FakeTierLimit
from amp_conformance.checks.legacy.check import check_legacy
from amp_conformance.checks.numerics.check import check_numerics
from amp_conformance.checks.outside.check import check_outside
from amp_conformance.checks.policy.check import check_policy


@contextlib.contextmanager
def fake_tier():
    try:
        yield
    except FakeTierLimit as exc:
        pytest.skip(str(exc))


@pytest.mark.amp_check("policy")
def test_policy(amp_case, record_property):
    """Inside autocast each variant gives the expected dtype and the variants agree;
    a banned op raises its documented error inside and runs outside."""
    observed = {}
    try:
        with fake_tier():
            defects.verdict(amp_case, lambda case: check_policy(case, observed),
                            record_property)
    finally:
        record_property("amp_observed", observed)


@pytest.mark.amp_check("numerics")
def test_numerics(amp_case, record_property):
    """The autocast output equals a control computed with autocast disabled on inputs
    cast by hand to the policy's dtype (bitwise, or close with --numerics close)."""
    defects.verdict(amp_case, check_numerics, record_property)


@pytest.mark.amp_check("outside")
def test_outside(amp_case):
    """Outside autocast the same call runs in its input dtypes, untouched."""
    with fake_tier():
        check_outside(amp_case)


@pytest.mark.amp_check("legacy")
def test_legacy(amp_case, record_property):
    """The legacy torch.<device>.amp.autocast gives torch.autocast's result and warns."""
    defects.verdict(amp_case, check_legacy, record_property)


@pytest.mark.amp_check("backward")
@pytest.mark.amp_needs("autograd")
def test_backward(amp_case, record_property):
    """Backward after an autocast region gives every float32 input a gradient in its dtype,
    equal to the one through the hand-cast control (bitwise, or close)."""
    defects.verdict(amp_case, backward.check_backward, record_property)
