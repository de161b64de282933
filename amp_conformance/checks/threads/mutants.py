"""Mutants of the threads family: a cast cache whose clear misses other threads, backward
in the default dtype."""

from __future__ import annotations

import functools

import torch

from amp_conformance.checks.mutation import (
    Mutant,
    patch,
    python_mm_cache,
    register,
)

register(Mutant(
    name="cache-clear-per-thread",
    description="a global cast cache whose clear (and outermost exit) drops only the clearing "
                "thread's casts: another thread keeps a stale cast (pytorch#86136)",
    apply=python_mm_cache(per_thread_clear=True),
    expect=("used a stale cached cast", "pytorch#86136"),
    select="test_clear_reaches_other_threads",
))




def _backward_in_default_dtype(original):
    """torch.autograd.backward running with cpu's autocast dtype reset to the default, as
    an autograd thread that does not inherit the caller's dtype would (pytorch#132715)."""
    @functools.wraps(original)
    def backward(*args, **kwargs):
        before = torch.get_autocast_dtype("cpu")
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        try:
            return original(*args, **kwargs)
        finally:
            torch.set_autocast_dtype("cpu", before)
    return backward


register(Mutant(
    name="backward-thread-default-dtype",
    description="backward runs with the device's default autocast dtype, not the state of "
                "the thread that called backward() (pytorch#132715)",
    apply=patch(torch.autograd, "backward", _backward_in_default_dtype),
    expect=("a backward function on the calling thread saw (enabled, dtype) = (True, "
            "torch.bfloat16)", "pytorch#132715"),
    select="test_backward_sees_callers_state and float16",
))

