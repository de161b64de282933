"""Mutants of the api_surface family: legacy getters, no-argument queries, warnings, the
legacy custom_fwd."""

from __future__ import annotations

import functools
import warnings

import torch

from amp_conformance.checks.mutation import (
    _AUTOCAST,
    FP32,
    Mutant,
    cast_kernel,
    patch,
    register,
)

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
