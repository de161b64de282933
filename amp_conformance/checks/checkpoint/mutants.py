"""Mutants of the checkpoint family: torch.utils.checkpoint recomputing outside the forward's
autocast state (pytorch#71124)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import torch.utils.checkpoint as checkpoint_module

from amp_conformance.checks.mutation import (
    Mutant,
    patch,
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



class _ThroughLegacyAutocast(dict):
    """Recorded autocast kwargs whose use in the recompute goes through the deprecated
    ``torch.cpu.amp.autocast``: it warns, from inside torch, on every backward."""

    def keys(self):  # noqa: ANN201 - what ``**kwargs`` calls on a dict subclass
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        return super().keys()

    def __iter__(self):  # noqa: ANN204 - overridden, so that ``**`` asks keys()
        return super().__iter__()


def _legacy_recompute(original):
    @functools.wraps(original)
    def _get_autocast_kwargs(*args, **kwargs):
        device_kwargs, cpu_kwargs = original(*args, **kwargs)
        return device_kwargs, _ThroughLegacyAutocast(cpu_kwargs)
    return _get_autocast_kwargs


register(Mutant(
    name="checkpoint-recompute-warns",
    description="torch.utils.checkpoint's recompute enters the deprecated torch.cpu.amp.autocast: "
                "a FutureWarning on every backward, the autocast state right",
    apply=patch(checkpoint_module, "_get_autocast_kwargs", _legacy_recompute),
    expect=("the call warned where the reference gives no such warning: FutureWarning: "
            "`torch.cpu.amp.autocast(args...)` is deprecated", "checkpoint.py"),
    select="test_recompute_in_forward_state and reentrant",
))
