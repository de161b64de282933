"""Mutants of region state: nesting, enabled=False, the decorator form and the default dtype
not restored on exit.
"""

from __future__ import annotations

import functools
import warnings

import torch

from amp_conformance.checks.mutation import (
    _AUTOCAST,
    Mutant,
    Undo,
    _wrap_method,
    override_kernel,
    patch,
    register,
)

# -- region state not restored on exit ------------------------------------------------


def _exit_forgets_outer_dtype() -> Undo:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__exit__

    def broken_exit(self, *exc):
        result = original(self, *exc)
        torch.set_autocast_dtype(self.device, self.fast_dtype)  # the outer dtype is lost
        return result

    cls.__exit__ = broken_exit

    def undo() -> None:
        cls.__exit__ = original

    return undo


register(Mutant(
    name="exit-forgets-outer-dtype",
    description="torch.autocast.__exit__ leaves the inner region's dtype behind",
    apply=_exit_forgets_outer_dtype,
    expect="after the nested",
    select="test_other_dtype_subregion_restores_outer",
))
register(Mutant(
    name="exit-leaves-autocast-enabled",
    description="torch.autocast.__exit__ does not restore the enabled flag",
    apply=patch(_AUTOCAST, "__exit__", _wrap_method(
        after=lambda self, *exc: torch.set_autocast_enabled(self.device, self._enabled))),
    expect="autocast state changed by the check: enabled: False before, True after",
    select="test_region_sets_and_restores_state",
))
register(Mutant(
    name="exit-forgets-cache-flag",
    description="torch.autocast.__exit__ does not restore the cache flag of the outer region",
    apply=patch(_AUTOCAST, "__exit__", _wrap_method(
        after=lambda self, *exc: torch.set_autocast_cache_enabled(self._cache_enabled))),
    expect="cache flag inner False, after inner False",
    select="test_cache_flag_restored_after_subregion",
))


def _exit_skips_restore_on_exception(original):
    @functools.wraps(original)
    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None:
            torch.autocast_decrement_nesting()
            return False  # propagates, leaving enabled flag and dtype of the region behind
        return original(self, exc_type, exc_val, exc_tb)
    return __exit__


register(Mutant(
    name="exit-skips-restore-on-exception",
    description="torch.autocast.__exit__ restores nothing when the body raised",
    apply=patch(_AUTOCAST, "__exit__", _exit_skips_restore_on_exception),
    expect="enabled: False before, True after",
    select="test_state_restored_when_body_raises",
))


def _enter_ignores_enabled_false(self, *args) -> None:
    self._enabled = True


register(Mutant(
    name="disabled-subregion-stays-enabled",
    description="torch.autocast(enabled=False) enters an enabled region",
    apply=patch(_AUTOCAST, "__enter__", _wrap_method(before=_enter_ignores_enabled_false)),
    expect="enabled=False subregion",
    select="test_disabled_subregion_restores_outer",
))


def _init_default_float16(original):
    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, *args, **kwargs):
        original(self, device_type, torch.float16 if dtype is None else dtype, *args, **kwargs)
    return __init__


register(Mutant(
    name="default-dtype-float16",
    description="torch.autocast('cpu') without a dtype runs in float16, not the device "
                "default bfloat16",
    apply=patch(_AUTOCAST, "__init__", _init_default_float16),
    expect="without dtype ran in",
    select="test_default_autocast_dtype",
))


# -- wrong autocast dressed as an excuse: a tool's missing kernel, a backend's own words, the
# reference's warning (each spared its items before an excuse needed proof)


def _lowering_without_a_kernel() -> Undo:
    """mm's autocast kernel calls an op of the backend's own library with no CPU kernel."""
    ops = torch.library.Library("amp_selftest", "DEF")
    ops.define("fused_gemm(Tensor a, Tensor b) -> Tensor")

    def kernel(redispatch):
        def run(a, b):
            dtype = torch.get_autocast_dtype("cpu")
            return torch.ops.amp_selftest.fused_gemm(a.to(dtype), b.to(dtype))
        return run
    undo_kernel = override_kernel("mm", "AutocastCPU", kernel)

    def undo() -> None:
        undo_kernel()
        ops._destroy()
    return undo


class _VendorError(RuntimeError):
    """A backend's own exception class (its module is no package of torch or the suite)."""


_VendorError.__module__ = "vendor_backend"


def _raises_in_own_words(redispatch):
    def run(*args, **kwargs):
        raise _VendorError("cannot lower aten::_to_copy to a half layout for this call")
    return run


def _warns_borrowed_words(redispatch):
    def run(*args, **kwargs):
        warnings.warn_explicit("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                               "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning,
                               "/opt/vendor_backend/autocast.py", 1)
        return redispatch(*[a.to(torch.get_autocast_dtype("cpu")) if isinstance(
            a, torch.Tensor) else a for a in args], **kwargs)
    return run


register(Mutant(
    name="excuse-mm-lowering-without-a-kernel",
    description="mm's autocast kernel calls amp_selftest::fused_gemm, which has no CPU "
                "kernel: a kernel the device lacks, met only under autocast, is no tool's",
    apply=_lowering_without_a_kernel,
    expect="amp_selftest::fused_gemm",
    select="test_region_sets_and_restores_state",
))
register(Mutant(
    name="excuse-mm-raises-in-own-words",
    description="mm's autocast kernel raises the backend's own exception class naming "
                "aten::_to_copy: a tool's words, met only under autocast",
    apply=lambda: override_kernel("mm", "AutocastCPU", _raises_in_own_words),
    expect="aten::_to_copy",
    select="test_region_sets_and_restores_state",
))
register(Mutant(
    name="excuse-mm-warns-borrowed-words",
    description="mm's autocast kernel warns the reference's own deprecation from the "
                "backend's module: the words are the reference's, the place is not",
    apply=lambda: override_kernel("mm", "AutocastCPU", _warns_borrowed_words),
    expect=("the call warned where the reference gives no such warning", "autocast.py"),
    select="test_region_sets_and_restores_state",
))
