"""A mutant for the reference-defect verdict: a device that does neither what the contract
intends nor what PyTorch does today must fail (checks/defects.py).

For float16 beside bfloat16 the promote contract gives float32 and PyTorch today raises
"Unexpected floating ScalarType" (``prioritize-mixed-lower-precision``). This cat kernel
promotes every other input mix correctly but casts that one to the autocast dtype, so only
the entries carrying the defect can catch it, and only by failing both accounts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.core.casting import is_eligible
from amp_conformance.tools.selftest.mutation import Mutant, override_kernel, register

_LOWER = {torch.float16, torch.bfloat16}


def _neither_for_mixed_lower(redispatch: Callable) -> Callable:
    def cat(tensors: Any, dim: int = 0) -> torch.Tensor:
        eligible = [t.dtype for t in tensors if is_eligible(t, "cpu")]
        if _LOWER <= set(eligible):
            to = torch.get_autocast_dtype("cpu")
        else:
            to = functools.reduce(torch.promote_types, eligible) if eligible else None
        cast = [t.to(to) if to is not None and is_eligible(t, "cpu") else t for t in tensors]
        return redispatch(cast, dim)
    return cat


register(Mutant(
    name="cat-mixed-lower-to-amp",
    description="cat of float16 beside bfloat16 cast to the autocast dtype: neither the "
                "contract's float32 nor PyTorch's prioritize error",
    apply=lambda: override_kernel("cat", "AutocastCPU", _neither_for_mixed_lower),
    expect="Nor does it match PyTorch's behaviour today, reference defect "
           "prioritize-mixed-lower-precision",
    select="test_policy and cat",
))
