"""Mutants of the modules family: a module's op that autocast leaves uncast, a fused path
without its autocast rule, a module that leaves the region for its computation."""

from __future__ import annotations

from collections.abc import Callable

import torch

from amp_conformance.checks.mutation import Mutant, Undo, fake_mutant, keep_dtype, patch, register


def _without_autocast(module_cls: type) -> Callable[[], Undo]:
    """``module_cls.forward`` run with the caller's autocast turned off (as a library's
    layer might, for speed or by mistake)."""
    def make(forward):
        def run(self, *args, **kwargs):
            with torch.autocast("cpu", enabled=False):
                return forward(self, *args, **kwargs)
        return run
    return patch(module_cls, "forward", make)


register(Mutant(
    name="modules-linear-kept-fp32",
    description="the cpu autocast kernel of aten::linear casts nothing: nn.Linear runs, and "
                "answers, in float32 in every mode",
    apply=keep_dtype("linear"),
    expect=("torch.nn.Linear [Linear]", "output 0: float32 (3, 6), the control's bfloat16"),
    select="test_modules and bfloat16-Linear",
))

register(Mutant(
    name="modules-fused-attention-no-autocast",
    description="aten::_native_multi_head_attention, the fused path nn.MultiheadAttention "
                "takes in eval without grad, has no cpu autocast kernel: it runs in float32",
    apply=keep_dtype("_native_multi_head_attention"),
    expect=("MultiheadAttention-batch_first", "eval/no_grad: inside autocast it took "
            "aten::_native_multi_head_attention"),
    select="test_modules and bfloat16-MultiheadAttention-batch_first",
))

register(Mutant(
    name="modules-conv-leaves-the-region",
    description="nn.Conv2d's forward turns the caller's cpu autocast off around its "
                "computation: its output stays float32",
    apply=_without_autocast(torch.nn.Conv2d),
    expect=("torch.nn.Conv2d [Conv2d-padding]", "the control's bfloat16"),
    select="test_modules and bfloat16-Conv2d-padding",
))

fake_mutant(
    "cuda-modules-mha-projections-kept-fp32",
    "the AutocastCUDA kernel of aten::linear casts nothing: nn.MultiheadAttention's "
    "projections stay float32 on fake cuda",
    keep_dtype("linear", "AutocastCUDA"),
    ("MultiheadAttention-weights", "cuda (fake)", "the control's float16"),
    "test_modules and float16-MultiheadAttention-weights",
)
