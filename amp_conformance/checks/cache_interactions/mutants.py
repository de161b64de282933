"""Mutants of the cache_interactions family: cast caches that mishandle inference_mode,
no_grad passes and mixed grad contexts."""

from __future__ import annotations

from amp_conformance.checks.mutation import (
    Mutant,
    python_cast_cache,
    python_mm_cache,
    register,
)

register(Mutant(
    name="cache-keeps-inference-casts",
    description="the cast cache keeps a cast made under inference_mode: the next grad pass "
                "of the region gets an inference tensor",
    apply=python_mm_cache(inference=True),
    expect=("torch.mm after an inference_mode pass inside",
            "a cast cached under inference_mode"),
    select="test_inference_mode_interaction",
))
register(Mutant(
    name="cache-recaches-under-no_grad",
    description="under no_grad every cast of a parameter is cached anew: the cache grows "
                "with every iteration (pytorch#48049)",
    apply=python_mm_cache(recache_no_grad=True),
    expect=("casts of the weight alive", "pytorch#48049"),
    select="test_no_grad_iterations_do_not_leak",
))
register(Mutant(
    name="cache-no_grad-cast-without-history",
    description="the cast cache keeps a cast made under no_grad, without autograd history, "
                "for the grad passes after it (pytorch#158232)",
    apply=python_cast_cache(under_no_grad=True),
    expect=("after a no_grad pass", "pytorch#158232"),
    select="test_mixed_grad_contexts",
))
