"""The eligibility family's check (``suite/test_eligibility.py``, checks/eligibility)
catches a kernel that casts a tensor of another device: the selftest's mutant is applied
in-process and undone, and the check must fail with its own assertion, not the state-leak
guard's, while the autocast state comes back as it was."""

from __future__ import annotations

import pytest
import torch

from tests.mutants import CPU, suite_check_fails

pytestmark = pytest.mark.usefixtures("state_restored")


def test_eligibility_check_catches_addmm_casting_other_device():
    """On cpu the other device is meta: torch.addmm(meta scalar, m, m) enters the
    AutocastCPU kernel and fails on the device mix only after casting, so the check counts
    the casts of the meta tensor; a kernel that casts every floating tensor is caught."""
    import amp_conformance.checks.eligibility.mutants  # noqa: F401 (registers it)
    from amp_conformance.checks.registry import mutants
    from amp_conformance.suite import test_eligibility as eligibility
    CATALOGUE = mutants()

    eligibility.test_other_device_is_not_cast(CPU, torch.bfloat16)  # the real kernel passes
    undo = CATALOGUE["addmm-casts-other-device"].apply()
    try:
        suite_check_fails(lambda: eligibility.test_other_device_is_not_cast(CPU, torch.bfloat16),
                          "torch.addmm: a meta tensor in the call was cast")
    finally:
        undo()
