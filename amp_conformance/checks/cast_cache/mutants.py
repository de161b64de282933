"""Mutants of the cast cache: a parameter cast more than once per outermost region, or
cached where it must not be.
"""

from __future__ import annotations

import functools

import torch

from amp_conformance.checks.mutation import (
    _AUTOCAST,
    Mutant,
    _wrap_method,
    patch,
    python_cast_cache,
    register,
)

# -- the cast cache -------------------------------------------------------------------

register(Mutant(
    name="cache-never-enabled",
    description="torch.autocast.__enter__ switches the cast cache off whatever was asked",
    apply=patch(_AUTOCAST, "__enter__", _wrap_method(
        after=lambda self, *a: torch.set_autocast_cache_enabled(False))),
    expect="should cast a float32 parameter once per outermost autocast region",
    select="test_weight_cast_once_across_forward_and_backward",
))
register(Mutant(
    name="cache-never-cleared",
    description="torch.clear_autocast_cache is a no-op: casts outlive their region",
    apply=patch(torch, "clear_autocast_cache", lambda original: (lambda: None)),
    expect="weight cast 1 times in two regions, expected 2 (cache cleared)",
    select="test_cache_cleared_when_outermost_region_exits",
))


def _exit_always_clears_cache(original):
    @functools.wraps(original)
    def __exit__(self, *exc):
        result = original(self, *exc)
        torch.clear_autocast_cache()  # also when an outer region is still open
        return result
    return __exit__


register(Mutant(
    name="cache-cleared-by-inner-exit",
    description="leaving a nested region clears the cast cache of the outer one",
    apply=patch(_AUTOCAST, "__exit__", _exit_always_clears_cache),
    expect="across a nested region, expected 1",
    select="test_cache_survives_inner_region_exit",
))


def _init_forces_cache(self, *args, **kwargs) -> None:
    self._cache_enabled = True


register(Mutant(
    name="cache_enabled-false-ignored",
    description="torch.autocast(cache_enabled=False) keeps the cast cache on",
    apply=patch(_AUTOCAST, "__init__", _wrap_method(after=_init_forces_cache)),
    expect="cache_enabled=False left the cache on",
    select="test_cache_disabled_casts_every_time",
))





register(Mutant(
    name="cache-keeps-no_grad-casts",
    description="a Python cast cache for mm that also caches casts made under no_grad, so "
                "later outputs lose their grad_fn (pytorch#158232)",
    apply=python_cast_cache(under_no_grad=True),
    expect="made without autograd history",
    select="test_no_grad_does_not_poison_cache",
))
register(Mutant(
    name="cache-caches-non-leaf",
    description="a Python cast cache for mm that also caches non-leaf tensors",
    apply=python_cast_cache(non_leaf=True),
    expect="a non-leaf tensor was cast 1 times, expected 2 (not cached)",
    select="test_non_leaf_is_not_cached",
))
