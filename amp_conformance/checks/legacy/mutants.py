"""Mutants of the legacy entry points (``torch.<device>.amp.autocast``).
"""

from __future__ import annotations

import functools

import torch

from amp_conformance.checks.mutation import (
    Mutant,
    patch,
    register,
)

# -- the legacy entry point -----------------------------------------------------------


def _legacy_init_drops_dtype(original):
    @functools.wraps(original)
    def __init__(self, enabled=True, dtype=torch.bfloat16, cache_enabled=True):
        original(self, enabled=enabled, cache_enabled=cache_enabled)  # dtype dropped
    return __init__


register(Mutant(
    name="legacy-cpu-autocast-drops-dtype",
    description="torch.cpu.amp.autocast(dtype=...) ignores its dtype (runs in bfloat16)",
    apply=patch(torch.cpu.amp.autocast, "__init__", _legacy_init_drops_dtype),
    expect=("torch.cpu.amp.autocast(dtype=torch.float16)", "torch.autocast gave"),
    select="test_legacy and float16 and torch_16-mm",
))


def _legacy_new_silent(original):
    return staticmethod(lambda cls, *args, **kwargs: object.__new__(cls))


register(Mutant(
    name="legacy-cpu-autocast-no-deprecation",
    description="torch.cpu.amp.autocast no longer emits its FutureWarning",
    apply=patch(torch.cpu.amp.autocast, "__new__", _legacy_new_silent),
    expect="emitted no FutureWarning",
    select="test_legacy and torch_16-mm",
))
