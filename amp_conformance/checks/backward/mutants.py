"""Mutants of the backward check (``checks/backward/check.py``): autocast kernels whose forward is
right, in dtype and value, but whose gradients are not. No forward check can see them."""

from __future__ import annotations

from collections.abc import Callable

import torch

from amp_conformance.checks.mutation import Mutant, one_ulp_up, override_kernel, register

_BELOW_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _amp() -> torch.dtype:
    return torch.get_autocast_dtype("cpu")


def _detached_cast(redispatch: Callable) -> Callable:
    """Casts with a detached copy: the output has no graph back to the float32 inputs."""
    return lambda a, b: redispatch(a.detach().to(_amp()), b.detach().to(_amp()))


class _MmOneUlpOff(torch.autograd.Function):
    """mm whose backward formula is right but each gradient element one ulp high."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return torch.mm(a, b)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return one_ulp_up(grad.mm(b.t())), one_ulp_up(a.t().mm(grad))


def _perturbed_backward(redispatch: Callable) -> Callable:
    """Casts right, then runs mm through a custom autograd function one ulp off in backward."""
    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.to(_amp()), b.to(_amp())
        with torch._C._ExcludeDispatchKeyGuard(_BELOW_AUTOCAST_CPU):
            return _MmOneUlpOff.apply(a, b)
    return kernel


def _cast_in_place(redispatch: Callable) -> Callable:
    """Casts float32 inputs in place (``t.data = t.data.to(amp)``, to save the copy): the
    forward is right, but the parameter and so its gradient end up in the autocast dtype."""
    def kernel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for t in (a, b):
            if t.dtype == torch.float32:
                t.data = t.data.to(_amp())
        return redispatch(a, b)
    return kernel


register(Mutant(
    name="mm-cast-detached",
    description="the AutocastCPU mm kernel casts its inputs with .detach().to(dtype): right "
                "dtype and values, but no gradient flows back to the float32 inputs",
    apply=lambda: override_kernel("mm", "AutocastCPU", _detached_cast),
    expect=("torch.mm", "carries no gradient", "no gradient reaches args[0]"),
    select="test_backward and torch_16-mm",
))
register(Mutant(
    name="mm-grad-one-ulp-off",
    description="the AutocastCPU mm kernel casts right, then computes through a custom "
                "autograd function whose backward is one ulp off",
    apply=lambda: override_kernel("mm", "AutocastCPU", _perturbed_backward),
    expect=("torch.mm", "the gradient of args[0]", "not equal (bitwise)"),
    select="test_backward and torch_16-mm",
))
register(Mutant(
    name="mm-grad-in-autocast-dtype",
    description="the AutocastCPU mm kernel casts float32 inputs in place: the forward is "
                "right, the float32 parameters' gradients come back in the autocast dtype",
    apply=lambda: override_kernel("mm", "AutocastCPU", _cast_in_place),
    expect=("torch.mm", "the gradient of args[0] is torch.bfloat16, expected its input's "
            "dtype torch.float32"),
    select="test_backward and bfloat16-torch_16-mm",
))
