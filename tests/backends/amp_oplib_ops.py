"""The ops of the amplib operator library (``amp_oplib``), defined by :func:`define`
with the autocast rules it is given: the sound ones in ``amp_oplib``, broken ones in
``amp_oplib_broken``."""

from __future__ import annotations

import torch

LIBRARY = "amplib"
#: op -> the dtype its autocast rule casts to ("back": float32 inside, the output back in
#: the input's dtype, a kernel written as torchvision writes its own)
RULES = {"scaled_mm": torch.bfloat16, "unit_norm": torch.float32, "exp_sum": "back"}


def _scaled_mm(a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.mm(a, b) * scale


def _unit_norm(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm()


def _exp_sum(x: torch.Tensor) -> torch.Tensor:
    return x.exp().sum(-1)


_BELOW = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _exp_sum_in_float32(x: torch.Tensor) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(_BELOW):
        return torch.ops.amplib.exp_sum(x.float()).to(x.dtype)


def _scaled_mm_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.scale = inputs[2]


def _scaled_mm_grad(ctx, grad):  # noqa: ANN001, ANN202
    a, b = ctx.saved_tensors
    return grad @ b.mT * ctx.scale, a.mT @ grad * ctx.scale, None


def _unit_norm_setup(ctx, inputs, output) -> None:  # noqa: ANN001
    ctx.save_for_backward(inputs[0], output)


def _unit_norm_grad(ctx, grad):  # noqa: ANN001, ANN202
    x, y = ctx.saved_tensors
    return (grad - y * (grad * y).sum()) / x.norm()


def define(rules: dict[str, torch.dtype | None]) -> None:
    """Define the library's ops, each with the autocast rule ``rules`` gives (None: no
    rule), unless a module defined them already."""
    if hasattr(torch.ops, LIBRARY) and hasattr(getattr(torch.ops, LIBRARY), "scaled_mm"):
        return
    scaled = torch.library.custom_op(f"{LIBRARY}::scaled_mm", _scaled_mm, mutates_args=())
    norm = torch.library.custom_op(f"{LIBRARY}::unit_norm", _unit_norm, mutates_args=())
    exp_sum = torch.library.custom_op(f"{LIBRARY}::exp_sum", _exp_sum, mutates_args=())
    exp_sum.register_fake(lambda x: x.new_empty(x.shape[:-1]))
    scaled.register_fake(lambda a, b, scale: a.new_empty(a.shape[0], b.shape[1]))
    norm.register_fake(lambda x: torch.empty_like(x))
    scaled.register_autograd(_scaled_mm_grad, setup_context=_scaled_mm_setup)
    norm.register_autograd(_unit_norm_grad, setup_context=_unit_norm_setup)
    for op, dtype in rules.items():
        if dtype is None:
            continue
        if dtype == "back":
            torch.library.impl(f"{LIBRARY}::{op}", "AutocastCPU")(_exp_sum_in_float32)
            continue
        for device in ("cpu", "cuda"):
            torch.library.register_autocast(f"{LIBRARY}::{op}", device, dtype)

