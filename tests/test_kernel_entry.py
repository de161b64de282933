"""Kernel entry is part of the policy verdict: a backend without an autocast kernel for a
promote op fails, although builtin promotion gives the dtypes autocast would."""

from __future__ import annotations

import pytest
import torch

from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target


def _case(device: str, entry_id: str, fake: bool = False) -> Case:
    (entry,) = [e for e in load_oplist(device, ()).entries if e.id == entry_id]
    return Case(Target(device, fake), torch.bfloat16 if device == "cpu" else torch.float16, entry)


@pytest.fixture
def no_kernel():
    """Replace an op's Autocast kernel by a fallthrough: the device has no autocast for it."""
    libraries = []

    def drop(op: str, key: str) -> None:
        lib = torch.library.Library("aten", "IMPL")
        lib.impl(op, torch.library.fallthrough_kernel, key)
        libraries.append(lib)

    yield drop
    for lib in libraries:
        lib._destroy()


@pytest.mark.parametrize("entry_id", ["cat", "stack"])
def test_promote_op_without_an_autocast_kernel_fails_naming_op_and_key(no_kernel, entry_id):
    case = _case("cpu", entry_id)
    check_policy(case)  # torch's own AutocastCPU kernel: conforms
    no_kernel(entry_id, "AutocastCPU")
    with pytest.raises(ConformanceFailure) as info:
        check_policy(case)
    message = str(info.value)
    assert f"torch.{entry_id} entered no AutocastCPU kernel" in message, message
    assert "builtin type promotion can mimic promote" in message


def test_fake_device_without_the_kernel_fails_too(no_kernel):
    case = _case("cuda", "addcmul", fake=True)
    check_policy(case)
    no_kernel("addcmul", "AutocastCUDA")
    with pytest.raises(ConformanceFailure, match="entered no AutocastCUDA kernel"):
        check_policy(case)
