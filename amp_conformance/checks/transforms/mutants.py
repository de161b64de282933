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


# -- departures dressed as the transform's own (each was excused before excuses needed proof)


def _dtype_behind_a_value_quirk(original):
    @functools.wraps(original)
    def transform(func, *args, **kwargs):
        mapped = original(func, *args, **kwargs)

        def run(*a, **k):
            out = mapped(*a, **k)
            if torch.is_autocast_enabled("cpu"):  # the policy lost under the transform
                return out.float()
            return out * (1 + 2 ** -6)  # and a batching rule that rounds otherwise, always
        return run
    return transform


def _departs_further_under_autocast(original):
    @functools.wraps(original)
    def transform(func, *args, **kwargs):
        differentiated = original(func, *args, **kwargs)

        def run(*a, **k):
            grads, aux = differentiated(*a, **k)
            scale = 2.25 if torch.is_autocast_enabled("cpu") else 1.5
            return grads * scale, aux
        return run
    return transform


register(Mutant(
    name="transforms-vmap-dtype-behind-a-value-quirk",
    description="under torch.func.vmap the region's policy is lost (float32 out), and the "
                "batched call rounds otherwise without autocast too: a departure of values "
                "must not excuse one of dtypes",
    apply=patch(torch.func, "vmap", _dtype_behind_a_value_quirk),
    expect=("torch.func.vmap over torch_16", "output dtypes ['float32']"),
    select="test_transform and vmap-torch_16",
))
register(Mutant(
    name="transforms-grad-departs-further-under-autocast",
    description="torch.func.grad is off without autocast (its own departure) and further off "
                "under autocast: an entry excused by its own departure is still held to "
                "the transformed control on inputs cast by hand",
    apply=patch(torch.func, "grad", _departs_further_under_autocast),
    expect=("torch.func.grad over torch_16", "against the same transformed call on inputs "
                                             "cast by hand"),
    select="test_transform and grad-torch_16",
))
