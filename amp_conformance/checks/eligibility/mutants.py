"""Mutants of the eligibility rule: Autocast kernels that cast a tensor of another device.

Autocast casts a tensor only if it is floating, not float64 and on the autocast device.
The float64 and integer halves of the rule have mutants in the catalogue itself
(``mm-casts-float64``, ``cat-casts-integers``); these break the device half on cpu, where
the other device is ``meta``: a call that mixes meta and cpu tensors enters the
AutocastCPU kernel and fails on the device mix only after the kernel has cast, so the
checks count the casts of the meta tensor rather than look at an output.
"""

from __future__ import annotations

import torch

from amp_conformance.checks.mutation import (
    AMP,
    Mutant,
    cast_kernel,
    fake_mutant,
    patches,
    register,
)


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point()


register(Mutant(
    name="addmm-casts-other-device",
    description="the AutocastCPU addmm kernel casts every floating tensor of the call, a "
                "meta tensor beside the cpu ones included: eligibility ignores the device",
    apply=cast_kernel("addmm", AMP, also=_floating),
    expect=("torch.addmm: a meta tensor in the call was cast",),
    select="test_other_device_is_not_cast",
    device="cpu",
))


#: The lower-precision ops of the cpu list the policy property calls (policy.FORMS).
LOWER_OPS = ("mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "conv1d")


def _blind(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.dtype != torch.float64


register(Mutant(
    name="lower-kernels-cast-other-device",
    description="the AutocastCPU lower-precision kernels share an eligibility test that "
                "ignores the device (floating, not float64, of any device): the "
                "lower-precision property's device-mix calls count the cast",
    apply=patches(*(cast_kernel(op, AMP, also=_blind) for op in LOWER_OPS)),
    expect=("autocast cast an ineligible input", "tensor on meta"),
    select="test_policy_casts_only_eligible_inputs and lower",
    device="cpu",
))


# -- from the catalogue ------------------------------------------------------------

# -- eligibility: tensors autocast must leave alone -----------------------------------

register(Mutant(
    name="mm-casts-float64",
    description="the mm kernel casts float64 inputs to the autocast dtype too",
    apply=cast_kernel("mm", AMP, also=lambda t: t.dtype == torch.float64),
    expect="float64 inputs were cast",
    select="test_float64_is_not_cast",
))
register(Mutant(
    name="cat-casts-integers",
    description="the cat kernel casts integer inputs to the autocast dtype",
    apply=cast_kernel("cat", AMP, also=lambda t: not t.is_floating_point() and t.dtype != torch.bool),
    expect="integer inputs of torch.cat were cast",
    select="test_integer_is_not_cast",
))



fake_mutant("cuda-addmm-casts-cpu-scalar",
      "AutocastCUDA addmm (lower precision) also casts a cpu tensor of the call: "
      "eligibility ignores the device",
      cast_kernel("addmm", AMP, "AutocastCUDA",
                  also=lambda t: t.is_floating_point() and t.device.type == "cpu"),
      ("torch.addmm: a cpu tensor in the call was cast",),
      "test_other_device_is_not_cast")
