"""Mutants that ``--numerics close`` must still catch, and those it is declared to let through.

Under ``--numerics close`` every value comparison (``numerics``, ``outside``, ``legacy``,
the variants' agreement in ``policy``) uses ``torch.testing.assert_close``'s tolerances
for the compared dtype (``rtol``/``atol``: float32 1.3e-6/1e-5, float16 1e-3/1e-5,
bfloat16 1.6e-2/1e-5, float64 1e-7/1e-7, complex64 as float32), or the entry's own
``tolerance``. So the catalogue's one-ulp mutants survive there by design, and nothing
else would show that close mode still catches wrong math. The mutants here do, each in a
run with ``--numerics close`` (``options``): a right value in the wrong dtype, the wrong
op, values 1% off.

:data:`CLOSE_MODE` is the campaign of ``python -m amp_conformance selftest --numerics
close`` (see :mod:`amp_conformance.tools.selftest.runner`): every mutant it names runs with
``--numerics close``; None means it must be killed there, a string is why it is declared
to survive (and it fails the campaign if it is killed instead: close mode got stricter
than its documented tolerances).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.mutation import (
    AMP,
    FP32,
    Mutant,
    cast_kernel,
    one_ulp_up,
    override_kernel,
    register,
)

CLOSE = ("--numerics", "close")
WITHIN = "not equal (within tolerance)"


def scaled(factor: float) -> Callable[[Any], Any]:
    """``output`` for :func:`cast_kernel`: every floating or complex output times ``factor``."""
    def output(out: Any) -> Any:
        if isinstance(out, (list, tuple)):
            return type(out)(output(o) for o in out)
        if isinstance(out, torch.Tensor) and (out.is_floating_point() or out.is_complex()):
            return out * factor
        return out
    return output


def _upcast(out: Any) -> Any:
    """The right values, handed back in float32 (exact: every amp value is a float32 one)."""
    return out.float() if isinstance(out, torch.Tensor) else out


def _mm_of_transposed(redispatch: Callable) -> Callable:
    """An mm kernel that casts right but multiplies by the transposed second operand."""
    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        dtype = torch.get_autocast_dtype("cpu")
        return redispatch(a.to(dtype), b.to(dtype).t())
    return kernel


register(Mutant(
    name="close-mm-result-in-float32",
    description="mm cast and computed in the autocast dtype, the (exact) result handed back "
                "in float32: close mode still compares dtypes",
    apply=cast_kernel("mm", AMP, output=_upcast),
    expect=("torch.mm", WITHIN, "attribute 'dtype' do not match"),
    select="test_numerics and torch_16-mm",
    options=CLOSE,
))
register(Mutant(
    name="close-mm-of-transposed",
    description="mm cast right, but computing a @ b.T: the wrong op, far outside any tolerance",
    apply=lambda: override_kernel("mm", "AutocastCPU", _mm_of_transposed),
    expect=("torch.mm", WITHIN),
    select="test_numerics and torch_16-mm",
    options=CLOSE,
))
register(Mutant(
    name="close-mm-one-percent-off",
    description="mm cast right, result times 1.01: outside float16's rtol (1e-3); bfloat16's "
                "(1.6e-2) admits it, so the float16 items catch it",
    apply=cast_kernel("mm", AMP, output=scaled(1.01)),
    expect=("torch.mm", WITHIN),
    select="test_numerics and torch_16-mm",
    options=CLOSE,
))
register(Mutant(
    name="close-linalg_inv-one-percent-off",
    description="linalg_inv computed in float32 as it should, result times 1.01 (float32's "
                "rtol is 1.3e-6)",
    apply=cast_kernel("linalg_inv", FP32, output=scaled(1.01)),
    expect=("torch._C._linalg.linalg_inv", WITHIN),
    select="test_numerics and linalg_fp32-linalg_inv and not linalg_inv_ex",
    options=CLOSE,
))
register(Mutant(
    name="close-fft_fft-one-percent-off",
    description="fft_fft computed in float32 as it should, complex result times 1.01",
    apply=cast_kernel("fft_fft", FP32, output=scaled(1.01)),
    expect=("torch._C._fft.fft_fft", WITHIN),
    select="test_numerics and fft_fp32-fft_fft",
    options=CLOSE,
))

_ONE_ULP = ("one ulp is at most eps * |x|, within assert_close's rtol for every dtype (about "
            "11 eps for float32, 1 for float16, 2 for bfloat16), which close mode uses by "
            "design; the bitwise campaign kills it")

#: ``selftest --numerics close``: mutant name -> None (must be killed with --numerics close)
#: or why it survives there by design
CLOSE_MODE: dict[str, str | None] = {
    "close-mm-result-in-float32": None,
    "close-mm-of-transposed": None,
    "close-mm-one-percent-off": None,
    "close-linalg_inv-one-percent-off": None,
    "close-fft_fft-one-percent-off": None,
    "mm-one-ulp-off": _ONE_ULP,
    "linalg_inv-one-ulp-off": _ONE_ULP,
    "fft_fft-one-ulp-off": _ONE_ULP,
}


# -- from the catalogue ------------------------------------------------------------

# -- wrong numerics: the cast right, the result one ulp off ---------------------------

register(Mutant(
    name="mm-one-ulp-off",
    description="mm cast to the autocast dtype as it should, result moved by one ulp",
    apply=cast_kernel("mm", AMP, output=one_ulp_up),
    expect=("torch.mm", "not equal (bitwise)"),
    select="test_numerics and torch_16-mm",
))
register(Mutant(
    name="linalg_inv-one-ulp-off",
    description="linalg_inv (fp32 on CPU; not in PyTorch's CPU lists) computed in float32, "
                "result moved by one ulp",
    apply=cast_kernel("linalg_inv", FP32, output=one_ulp_up),
    expect=("torch._C._linalg.linalg_inv", "not equal (bitwise)"),
    select="test_numerics and linalg_fp32-linalg_inv and not linalg_inv_ex",
))
register(Mutant(
    name="fft_fft-one-ulp-off",
    description="fft_fft (fp32 on CPU; not in PyTorch's CPU lists) computed in float32, "
                "complex result moved by one ulp",
    apply=cast_kernel("fft_fft", FP32, output=one_ulp_up),
    expect=("torch._C._fft.fft_fft", "not equal (bitwise)"),
    select="test_numerics and fft_fp32-fft_fft",
))
