"""Mutants of the training tier (backward, checkpointing, threads, RNN modules, API surface):
broken implementations its checks must catch."""

from __future__ import annotations

import functools
import itertools
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint as checkpoint_module

from amp_conformance.core.casting import is_eligible
from amp_conformance.tools.selftest.mutation import (
    _AUTOCAST,
    FP32,
    Mutant,
    Undo,
    cast_kernel,
    keep_dtype,
    override_kernel,
    patch,
    python_cast_cache,
    register,
)

# -- checkpointing (pytorch#71124) ----------------------------------------------------


def _recompute_kwargs(edit: Callable[[dict], None]) -> Callable[[Any], Any]:
    """``make`` for torch.utils.checkpoint._get_autocast_kwargs: edit what the forward
    records for the recompute (device and cpu kwargs)."""
    def make(original):
        @functools.wraps(original)
        def _get_autocast_kwargs(*args, **kwargs):
            device_kwargs, cpu_kwargs = original(*args, **kwargs)
            for recorded in (device_kwargs, cpu_kwargs):
                if recorded is not None:
                    edit(recorded)
            return device_kwargs, cpu_kwargs
        return _get_autocast_kwargs
    return make


register(Mutant(
    name="checkpoint-recompute-default-dtype",
    description="torch.utils.checkpoint records the forward's enabled flag but not its dtype: "
                "the recompute runs in the device's default autocast dtype (pytorch#71124)",
    apply=patch(checkpoint_module, "_get_autocast_kwargs",
                _recompute_kwargs(lambda kw: kw.pop("dtype", None))),
    expect=("the recompute in backward ran in autocast state (enabled=True, dtype=bfloat16",
            "pytorch#71124"),
    select="test_recompute_in_forward_state and float16",
))
register(Mutant(
    name="checkpoint-recompute-without-autocast",
    description="torch.utils.checkpoint drops the forward's autocast state: the recompute "
                "runs with autocast off",
    apply=patch(checkpoint_module, "_get_autocast_kwargs",
                _recompute_kwargs(lambda kw: kw.update(enabled=False))),
    expect="the recompute in backward ran in autocast state (enabled=False",
    select="test_recompute_in_forward_state and non_reentrant",
))

# -- the cast cache and threads -------------------------------------------------------


def _python_mm_cache(*, per_thread_clear: bool = False, inference: bool = False,
                     recache_no_grad: bool = False) -> Callable[[], Undo]:
    """The cpu mm autocast kernel with a global cast cache of its own (as a backend
    without PyTorch's C++ cache would write one), with one bug: clearing drops only the
    clearing thread's entries, or casts made under inference_mode are cached, or every
    no_grad cast is cached under a new key (re-caching the same parameter)."""
    def apply() -> Undo:
        cache: dict[tuple, tuple[int, torch.Tensor]] = {}
        fresh = itertools.count()

        def cached(t: torch.Tensor) -> torch.Tensor:
            if not is_eligible(t, "cpu"):
                return t
            dtype = torch.get_autocast_dtype("cpu")
            if not (torch.is_autocast_cache_enabled() and t.requires_grad and t.is_leaf) or \
                    (torch.is_inference_mode_enabled() and not inference):
                return t.to(dtype)
            key: tuple = (id(t), dtype)
            if recache_no_grad and not torch.is_grad_enabled():
                key += (next(fresh),)
            if key not in cache:
                with torch.enable_grad():
                    cache[key] = (threading.get_ident(), t.to(dtype))
            return cache[key][1]

        undo_kernel = override_kernel(
            "mm", "AutocastCPU", lambda redispatch: lambda a, b: redispatch(cached(a), cached(b)))
        original_clear = torch.clear_autocast_cache

        def clear() -> None:
            me = threading.get_ident()
            for key in [k for k, (owner, _) in cache.items()
                        if not per_thread_clear or owner == me]:
                cache.pop(key, None)
            original_clear()

        torch.clear_autocast_cache = clear

        def undo() -> None:
            torch.clear_autocast_cache = original_clear
            undo_kernel()
        return undo
    return apply


register(Mutant(
    name="cache-clear-per-thread",
    description="a global cast cache whose clear (and outermost exit) drops only the clearing "
                "thread's casts: another thread keeps a stale cast (pytorch#86136)",
    apply=_python_mm_cache(per_thread_clear=True),
    expect=("used a stale cached cast", "pytorch#86136"),
    select="test_clear_reaches_other_threads",
))
register(Mutant(
    name="cache-keeps-inference-casts",
    description="the cast cache keeps a cast made under inference_mode: the next grad pass "
                "of the region gets an inference tensor",
    apply=_python_mm_cache(inference=True),
    expect=("torch.mm after an inference_mode pass inside",
            "a cast cached under inference_mode"),
    select="test_inference_mode_interaction",
))
register(Mutant(
    name="cache-recaches-under-no_grad",
    description="under no_grad every cast of a parameter is cached anew: the cache grows "
                "with every iteration (pytorch#48049)",
    apply=_python_mm_cache(recache_no_grad=True),
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

# -- RNN modules ----------------------------------------------------------------------

register(Mutant(
    name="rnn-tanh-linear-kept-fp32",
    description="the cpu autocast kernel of aten::linear casts nothing: an RNN_TANH module "
                "runs, and answers, in float32",
    apply=keep_dtype("linear"),
    expect=("rnn_tanh (RNN_TANH, 1 layer) under torch.autocast('cpu'", "output torch.float32"),
    select="test_forward_dtypes and rnn_tanh",
))

# -- the API surface ------------------------------------------------------------------

register(Mutant(
    name="legacy-cpu-dtype-getter-diverges",
    description="torch.get_autocast_cpu_dtype() always answers bfloat16, whatever the "
                "region's dtype",
    apply=patch(torch, "get_autocast_cpu_dtype", lambda original: lambda: torch.bfloat16),
    expect=("torch.get_autocast_cpu_dtype() -> torch.bfloat16", "pytorch#65786"),
    select="test_legacy_dtype_getters and float16",
))


def _noarg_means_any(original):
    @functools.wraps(original)
    def is_autocast_enabled(*args, **kwargs):
        if args or kwargs:
            return original(*args, **kwargs)
        return torch._C._is_any_autocast_enabled()
    return is_autocast_enabled


register(Mutant(
    name="noarg-is-autocast-enabled-any-device",
    description="torch.is_autocast_enabled() without a device reports any device's flag, "
                "not CUDA's",
    apply=patch(torch, "is_autocast_enabled", _noarg_means_any),
    expect="without a device it must report CUDA's flag only",
    select="test_noarg_is_autocast_enabled_means_cuda",
))
register(Mutant(
    name="any-autocast-ignores-xpu",
    description="torch._C._is_any_autocast_enabled() consults cpu and cuda only",
    apply=patch(torch._C, "_is_any_autocast_enabled", lambda original: lambda: (
        torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda"))),
    expect="with only xpu's autocast flag on, torch._C._is_any_autocast_enabled() is False",
    select="test_any_autocast_enabled and xpu",
))


def _warns_when_disabled(original):
    """torch.autocast('cuda', enabled=False) warning that CUDA is absent (pytorch#67598)."""
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        original(self, device_type, *args, **kwargs)
        if device_type == "cuda" and not torch.cuda.is_available() and not self._enabled:
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. "
                          "Disabling", stacklevel=2)
    return __init__


register(Mutant(
    name="disabled-cuda-region-warns",
    description="torch.autocast('cuda', enabled=False) warns that CUDA is not available",
    apply=patch(_AUTOCAST, "__init__", _warns_when_disabled),
    expect=("torch.autocast('cuda', enabled=False) warned", "pytorch#67598"),
    select="test_disabled_cuda_region_does_not_warn",
))


def _legacy_fwd_ignores_cast_inputs(original):
    @functools.wraps(original)
    def custom_fwd(fwd=None, *, cast_inputs=None):
        if fwd is None:
            return lambda f: original(f)  # cast_inputs dropped; still warns
        return original(fwd)
    return custom_fwd


register(Mutant(
    name="legacy-cuda-custom_fwd-ignores-cast_inputs",
    description="torch.cuda.amp.custom_fwd(cast_inputs=...) drops cast_inputs",
    apply=patch(torch.cuda.amp, "custom_fwd", _legacy_fwd_ignores_cast_inputs),
    expect="torch.cuda.amp.custom_fwd({'cast_inputs': torch.float32})",
    select="test_legacy_custom_fwd",
    device="cuda",
    fake=True,
))
register(Mutant(
    name="vector_norm-casts-float64",
    description="a cpu autocast kernel for linalg_vector_norm that casts float64 inputs to "
                "float32 too",
    apply=cast_kernel("linalg_vector_norm", FP32, also=lambda t: t.dtype == torch.float64),
    expect=("torch.linalg.vector_norm(x) on a float64 input -> torch.float32",),
    select="test_norm_float64_stays_float64",
))
