"""Mutants of the transforms family: a transform that does not carry the autocast state
into the function it transforms."""

from __future__ import annotations

import functools

import torch

from amp_conformance.checks.mutation import Mutant, patch, register


def _without_autocast(original):
    @functools.wraps(original)
    def transform(func, *args, **kwargs):
        @functools.wraps(func)
        def inner(*a, **k):
            with torch._C._DisableAutocast():
                return func(*a, **k)
        return original(inner, *args, **kwargs)
    return transform


register(Mutant(
    name="transforms-vmap-drops-autocast",
    description="torch.func.vmap runs the function it maps with autocast off: the region's "
                "policy is lost inside the transform",
    apply=patch(torch.func, "vmap", _without_autocast),
    expect=("torch.func.vmap over torch_16", "torch.mm [entry mm]", "untransformed"),
    select="test_transform and vmap-torch_16",
))
register(Mutant(
    name="transforms-grad-drops-autocast",
    description="torch.func.grad runs the function it differentiates with autocast off",
    apply=patch(torch.func, "grad", _without_autocast),
    expect=("torch.func.grad over torch_16", "torch.mm [entry mm]", "untransformed"),
    select="test_transform and grad-torch_16",
))
