"""Snapshots of the thread's autocast state, so every check can prove it left none behind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch


def nesting() -> int:
    """The autocast nesting depth, read without leaving a trace."""
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


@dataclass(frozen=True)
class AutocastState:
    device: str
    enabled: bool
    dtype: torch.dtype
    cache_enabled: bool
    nesting: int
    cpu_enabled: bool
    cpu_dtype: torch.dtype

    @classmethod
    def capture(cls, device: str) -> AutocastState:
        return cls(
            device=device,
            enabled=torch.is_autocast_enabled(device),
            dtype=torch.get_autocast_dtype(device),
            cache_enabled=torch.is_autocast_cache_enabled(),
            nesting=nesting(),
            cpu_enabled=torch.is_autocast_enabled("cpu"),
            cpu_dtype=torch.get_autocast_dtype("cpu"),
        )

    def restore(self) -> None:
        torch.set_autocast_enabled(self.device, self.enabled)
        torch.set_autocast_dtype(self.device, self.dtype)
        torch.set_autocast_enabled("cpu", self.cpu_enabled)
        torch.set_autocast_dtype("cpu", self.cpu_dtype)
        torch.set_autocast_cache_enabled(self.cache_enabled)
        depth = nesting()
        while depth < self.nesting:
            depth = torch.autocast_increment_nesting()
        while depth > self.nesting:
            depth = torch.autocast_decrement_nesting()
        if depth == 0:
            torch.clear_autocast_cache()

    def diff(self, other: AutocastState) -> list[str]:
        return [
            f"{name}: {getattr(self, name)} before, {getattr(other, name)} after"
            for name in ("enabled", "dtype", "cache_enabled", "nesting", "cpu_enabled", "cpu_dtype")
            if getattr(self, name) != getattr(other, name)
        ]


class StateLeak(AssertionError):
    pass


@contextlib.contextmanager
def unchanged_autocast_state(device: str, what: str) -> Iterator[AutocastState]:
    """Assert the autocast state after the block equals the state before; always restore it."""
    before = AutocastState.capture(device)
    failed = False
    try:
        yield before
    except BaseException:
        failed = True
        raise
    finally:
        after = AutocastState.capture(device)
        before.restore()
        if not failed:
            changes = before.diff(after)
            if changes:
                raise StateLeak(f"autocast state changed by {what}: " + "; ".join(changes))


@contextlib.contextmanager
def grad_and_dtype_restored() -> Iterator[None]:
    """Restore grad mode and the default dtype, which checks may touch."""
    grad = torch.is_grad_enabled()
    default = torch.get_default_dtype()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(default)
