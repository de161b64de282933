"""Mutants of region state: nesting, enabled=False, the decorator form and the default dtype
not restored on exit.
"""

from __future__ import annotations

import functools

import torch

from amp_conformance.checks.mutation import (
    _AUTOCAST,
    Mutant,
    Undo,
    _wrap_method,
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
