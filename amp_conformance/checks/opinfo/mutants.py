"""Mutants of the operator-surface tier (``--amp-opinfo``): argument-form bugs.

Each is an AutocastCPU kernel that casts as the policy says on the one call an op-list
entry makes (contiguous operands of full shape, default keywords), so the default run
stays green against it; it breaks on an argument form only OpInfo's samples take: a
keyword, a 0-dim operand, a layout, a rank, broadcasting, an empty operand. Each must be killed
by ``test_opinfo`` naming the op and what went wrong.

The next four break on a form OpInfo's sample makers put at the third sample or later (a
grouped convolution, a loss's ``reduction``, a vector beside a batch in matmul, baddbmm's
``beta``): the default draw (``--amp-opinfo-samples forms``, every argument form) kills
them, the first two samples do not (``tests/test_selftest.py`` runs both). The last
ignores a keyword value that changes nothing in the samples showing every form (quantile's
``interpolation='midpoint'`` over one element): the default draw kills it by adding a
sample where the value changes the result (``tests/test_selftest.py``: not without).
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
    override_kernel,
    patches,
    register,
)
from amp_conformance.core.casting import is_eligible

OPINFO = ("--amp-opinfo",)
INSIDE_ONLY = "works outside autocast, raises inside"


def _amp() -> torch.dtype:
    return torch.get_autocast_dtype("cpu")


def _cast(*tensors: Any) -> list[Any]:
    """The eligible tensors cast to the autocast dtype, as the policy says (the mutants'
    bugs are elsewhere)."""
    dtype = _amp()
    return [t.to(dtype) if isinstance(t, torch.Tensor) and is_eligible(t, "cpu") else t
            for t in tensors]


def _scalar_weight(redispatch: Callable) -> Callable:
    """prelu that takes a 0-dim weight for a Python number (``weight.item()``) and builds a
    new tensor of it, in the default dtype: float32 where the policy says lower precision."""
    def kernel(x, weight):
        x, weight = _cast(x, weight)
        if weight.dim() == 0:
            weight = torch.tensor(weight.item(), device=weight.device)
        return redispatch(x, weight)
    return kernel


def _assumes_contiguous(redispatch: Callable) -> Callable:
    """conv2d that reads its input's memory as if it were contiguous (as a raw-pointer
    kernel does): right for a cast copy (always contiguous), wrong for an input already in
    the autocast dtype and non-contiguous, which autocast passes on as it is."""
    def kernel(x, weight, *rest):
        x, weight, *rest = _cast(x, weight, *rest)
        return redispatch(x.as_strided(x.shape, torch.empty(x.shape).stride()), weight, *rest)
    return kernel


def _assumes_matrices(redispatch: Callable) -> Callable:
    """linalg_vecdot that normalises its operands' layout through the matrix transpose
    (``.mT.mT``), which 1-D operands do not have."""
    def kernel(x, y, *, dim=-1):
        x, y = _cast(x, y)
        return redispatch(x.mT.mT, y.mT.mT, dim=dim)
    return kernel


def _no_broadcast(redispatch: Callable) -> Callable:
    """baddbmm that reshapes ``self`` to the full (b, n, p) result instead of broadcasting it."""
    def kernel(self, batch1, batch2, *, beta=1, alpha=1):
        self, batch1, batch2 = _cast(self, batch1, batch2)
        full = self.reshape(batch1.shape[0], batch1.shape[1], batch2.shape[2])
        return redispatch(full, batch1, batch2, beta=beta, alpha=alpha)
    return kernel


def _empty_in_float32(redispatch: Callable) -> Callable:
    """linalg_vecdot with an early exit for empty operands that returns float32 zeros."""
    def kernel(x, y, *, dim=-1):
        if x.numel() == 0 or y.numel() == 0:
            shape = torch.broadcast_shapes(x.shape, y.shape)
            reduced = [n for i, n in enumerate(shape) if i != dim % max(len(shape), 1)]
            return torch.zeros(reduced, dtype=torch.float32, device=x.device)
        return redispatch(*_cast(x, y), dim=dim)
    return kernel


def _to(dtype: torch.dtype, *tensors: Any) -> list[Any]:
    return [t.to(dtype) if isinstance(t, torch.Tensor) and is_eligible(t, "cpu") else t
            for t in tensors]


def _ignores_groups(redispatch: Callable) -> Callable:
    """conv2d cast right but always called with groups=1: a grouped convolution's input
    no longer matches its weight."""
    def kernel(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        x, weight, bias = _cast(x, weight, bias)
        return redispatch(x, weight, bias, stride, padding, dilation, 1)
    return kernel


def _drops_reduction(redispatch: Callable) -> Callable:
    """mse_loss cast to float32 but called without its reduction (the default, mean)."""
    def kernel(x, target, reduction=1):
        return redispatch(*_to(torch.float32, x, target))
    return kernel


def _vector_into_batch(redispatch: Callable) -> Callable:
    """matmul cast right, but a 1-D first operand of a batched product kept as a row:
    the prepended dimension is never removed."""
    def kernel(x, y):
        x, y = _cast(x, y)
        if x.dim() == 1 and y.dim() >= 3:
            return redispatch(x.unsqueeze(0), y)
        return redispatch(x, y)
    return kernel


def _ignores_beta(redispatch: Callable) -> Callable:
    """baddbmm cast right but self always added in full (beta taken as 1)."""
    def kernel(self, batch1, batch2, *, beta=1, alpha=1):
        self, batch1, batch2 = _cast(self, batch1, batch2)
        return redispatch(self, batch1, batch2, beta=1, alpha=alpha)
    return kernel


register(Mutant(
    name="opinfo-addmm-drops-beta-alpha",
    description="addmm cast right but called without its beta and alpha keywords (dropped keywords)",
    apply=cast_kernel("addmm", AMP, drop_kwargs=("beta", "alpha")),
    expect=("OpInfo addmm", "not equal"),
    select="test_opinfo and addmm", options=OPINFO,
))
register(Mutant(
    name="opinfo-prelu-scalar-weight",
    description="prelu cast right but a 0-dim weight rebuilt from its Python value in float32 "
                "(scalars)",
    apply=lambda: override_kernel("prelu", "AutocastCPU", _scalar_weight),
    expect=("OpInfo nn.functional.prelu", "float32"),
    select="test_opinfo and prelu", options=OPINFO,
))
register(Mutant(
    name="opinfo-conv2d-assumes-contiguous",
    description="conv2d cast right but reading its input as if contiguous: a non-contiguous "
                "input already in the autocast dtype gives wrong values (layout)",
    apply=lambda: override_kernel("conv2d", "AutocastCPU", _assumes_contiguous),
    expect=("OpInfo nn.functional.conv2d", "noncontiguous", "not equal"),
    select="test_opinfo and nn.functional.conv2d", options=OPINFO,
))
register(Mutant(
    name="opinfo-vecdot-assumes-matrices",
    description="linalg_vecdot cast right but through the matrix transpose: 1-D operands "
                "raise (rank)",
    apply=lambda: override_kernel("linalg_vecdot", "AutocastCPU", _assumes_matrices),
    expect=("OpInfo linalg.vecdot", INSIDE_ONLY),
    select="test_opinfo and linalg.vecdot", options=OPINFO,
))
register(Mutant(
    name="opinfo-baddbmm-no-broadcast",
    description="baddbmm cast right but viewing self as the full result instead of broadcasting "
                "it (broadcasting)",
    apply=lambda: override_kernel("baddbmm", "AutocastCPU", _no_broadcast),
    expect=("OpInfo baddbmm", INSIDE_ONLY),
    select="test_opinfo and baddbmm", options=OPINFO,
))
register(Mutant(
    name="opinfo-vecdot-empty-in-float32",
    description="linalg_vecdot cast right but empty operands short-cut to float32 zeros (empty tensors)",
    apply=lambda: override_kernel("linalg_vecdot", "AutocastCPU", _empty_in_float32),
    expect=("OpInfo linalg.vecdot", "float32"),
    select="test_opinfo and linalg.vecdot", options=OPINFO,
))

# -- forms beyond the first two samples: killed by the default draw, not by 2 samples ------
register(Mutant(
    name="opinfo-conv2d-ignores-groups",
    description="conv2d cast right but always called with groups=1 (a grouped convolution: "
                "OpInfo's third sample)",
    apply=lambda: override_kernel("conv2d", "AutocastCPU", _ignores_groups),
    expect=("OpInfo nn.functional.conv2d", INSIDE_ONLY),
    select="test_opinfo and nn.functional.conv2d", options=OPINFO,
))
register(Mutant(
    name="opinfo-mse-loss-drops-reduction",
    description="mse_loss cast to float32 but its reduction dropped (reduction='sum': "
                "OpInfo's third sample)",
    apply=lambda: override_kernel("mse_loss", "AutocastCPU", _drops_reduction),
    expect=("OpInfo nn.functional.mse_loss", "not equal"),
    select="test_opinfo and nn.functional.mse_loss", options=OPINFO,
))
register(Mutant(
    name="opinfo-matmul-vector-into-batch",
    description="matmul cast right but a 1-D operand times a batch keeps a spurious "
                "dimension (OpInfo's ninth sample)",
    apply=lambda: override_kernel("matmul", "AutocastCPU", _vector_into_batch),
    expect=("OpInfo matmul", "shape"),
    select="test_opinfo and matmul", options=OPINFO,
))
register(Mutant(
    name="opinfo-baddbmm-ignores-beta",
    description="baddbmm cast right but beta taken as 1 (beta=0.2: OpInfo's third sample)",
    apply=lambda: override_kernel("baddbmm", "AutocastCPU", _ignores_beta),
    expect=("OpInfo baddbmm", "not equal"),
    select="test_opinfo and baddbmm", options=OPINFO,
))


# -- a keyword value whose effect only some samples show: killed by the default draw -----
register(Mutant(
    name="opinfo-quantile-ignores-interpolation",
    description="quantile cast to float32 but its interpolation dropped (always linear): "
                "'midpoint' changes nothing in the samples that show every form",
    apply=patches(cast_kernel("quantile", FP32, drop_kwargs=("interpolation",)),
                  cast_kernel("quantile.scalar", FP32, drop_kwargs=("interpolation",))),
    expect=("OpInfo quantile", "not equal"),
    select="test_opinfo and quantile and not nanquantile", options=OPINFO,
))
