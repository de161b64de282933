"""Activation checkpointing under autocast: the recompute runs in the forward's autocast state.

``torch.utils.checkpoint`` records the autocast state (enabled, dtype, cache flag) of the
forward and re-enters it when it recomputes in backward. Users call ``backward()`` outside
the autocast region, so a recompute that re-enters autocast with the device's *default*
dtype instead of the forward's (pytorch#71124) recomputes different activations: the
gradients no longer match an un-checkpointed run. The default dtype hides the bug, so the
telling case is the non-default amp dtype (float16 on cpu, bfloat16 on cuda); the cast
cache can hide it too (a recompute inside the region reuses the cached cast), so every
variant also runs with ``cache_enabled=False``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from amp_conformance.core.compare import compare
from amp_conformance.core.devices import dtype_name
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

#: The checkpoint entry points, by id, and how a failure names them.
VARIANTS: dict[str, str] = {
    "reentrant": "checkpoint(use_reentrant=True)",
    "non_reentrant": "checkpoint(use_reentrant=False)",
    "sequential_reentrant": "checkpoint_sequential(segments=2, use_reentrant=True)",
    "sequential_non_reentrant": "checkpoint_sequential(segments=2, use_reentrant=False)",
}
_WIDTH, _LAYERS = 8, 4


@dataclass(frozen=True)
class Seen:
    """The autocast state a function saw when it ran."""

    enabled: bool
    dtype: torch.dtype
    cache_enabled: bool
    cpu_enabled: bool
    cpu_dtype: torch.dtype

    @classmethod
    def now(cls, device: str) -> Seen:
        return cls(torch.is_autocast_enabled(device), torch.get_autocast_dtype(device),
                   torch.is_autocast_cache_enabled(), torch.is_autocast_enabled("cpu"),
                   torch.get_autocast_dtype("cpu"))

    def __str__(self) -> str:
        text = f"(enabled={self.enabled}, dtype={dtype_name(self.dtype)}, " \
               f"cache_enabled={self.cache_enabled}"
        return text + f"; cpu enabled={self.cpu_enabled}, dtype={dtype_name(self.cpu_dtype)})"


class Recorder(torch.nn.Module):
    """A Linear + ReLU layer that logs the autocast state at every call."""

    def __init__(self, device: str, seed: int, log: list[Seen]):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(_WIDTH, _WIDTH, generator=g).to(device))
        self.bias = torch.nn.Parameter(torch.randn(_WIDTH, generator=g).to(device))
        self.device, self.log = device, log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.log.append(Seen.now(self.device))
        return torch.nn.functional.linear(x, self.weight, self.bias).relu()


def build(device: str) -> tuple[torch.nn.Sequential, torch.Tensor, list[Seen]]:
    """The same model and input every time (fixed seeds), and the model's state log."""
    log: list[Seen] = []
    model = torch.nn.Sequential(*(Recorder(device, seed, log) for seed in range(_LAYERS)))
    x = torch.randn(4, _WIDTH, generator=torch.Generator().manual_seed(99)).to(device)
    return model, x.requires_grad_(), log


def runner(variant: str) -> Callable[[torch.nn.Sequential, torch.Tensor], torch.Tensor]:
    reentrant = variant in ("reentrant", "sequential_reentrant")
    if variant.startswith("sequential"):
        return lambda m, x: checkpoint_sequential(m, 2, x, use_reentrant=reentrant)
    return lambda m, x: checkpoint(m, x, use_reentrant=reentrant)


def _train_step(target: Target, dtype: torch.dtype, cache_enabled: bool,
                forward: Callable[[torch.nn.Sequential, torch.Tensor], torch.Tensor]) -> tuple:
    """Forward inside the region, backward outside it; returns the outputs, the grads,
    the state log and what backward raised (None if nothing)."""
    model, x, log = build(target.device)
    with target.autocast(dtype, cache_enabled=cache_enabled):
        y = forward(model, x)
        loss = y.float().sum()
    forward_calls = len(log)
    error = None
    try:
        loss.backward()
    except RuntimeError as exc:  # e.g. non-reentrant's metadata check on a wrong-dtype recompute
        error = exc
    grads = {"input grad": x.grad, **{f"grad of {n}": p.grad for n, p in model.named_parameters()}}
    return y.detach(), grads, log[:forward_calls], log[forward_calls:], error


def check_checkpoint(target: Target, dtype: torch.dtype, variant: str, cache_enabled: bool,
                     numerics: str) -> None:
    """The recompute sees the forward's autocast state; outputs and gradients equal the
    un-checkpointed run's (bitwise, or close with ``--numerics close``)."""
    dev, what = target.device, f"{VARIANTS[variant]} on {target.device}, {dtype_name(dtype)}, " \
        f"cache_enabled={cache_enabled}, backward() outside the region"
    outside = Seen.now(dev)
    y_ref, grads_ref, _, _, error = _train_step(target, dtype, cache_enabled, lambda m, x: m(x))
    if error is not None:
        raise ConformanceFailure(f"{what}: the un-checkpointed backward raised {error}")
    y, grads, fwd, recomputed, error = _train_step(target, dtype, cache_enabled, runner(variant))
    expected = Seen(True, dtype, cache_enabled, *((True, dtype) if dev == "cpu"
                                                 else (outside.cpu_enabled, outside.cpu_dtype)))
    wrong = [str(s) for s in fwd if s != expected]
    if wrong:
        raise ConformanceFailure(f"{what}: the checkpointed forward ran in {wrong[0]}, "
                                 f"expected the region's {expected}")
    if not recomputed:
        raise ConformanceFailure(f"{what}: backward never recomputed the checkpointed layers")
    wrong = [str(s) for s in recomputed if s != expected]
    if wrong:
        raise ConformanceFailure(
            f"{what}: the recompute in backward ran in autocast state {wrong[0]}, the forward "
            f"in {expected} (pytorch#71124: checkpoint recomputed in the device's default "
            "autocast dtype instead of the forward's)"
        )
    if error is not None:
        raise ConformanceFailure(f"{what}: backward raised {type(error).__name__}: {error}")
    compare(y, y_ref, numerics, None, f"{what}: output against the un-checkpointed run")
    for name, want in grads_ref.items():
        got = grads[name]
        if got is None:
            raise ConformanceFailure(f"{what}: {name} is None after backward")
        compare(got, want, numerics, None, f"{what}: {name} against the un-checkpointed run")
