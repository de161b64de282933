"""Planted region swaps, predicates and scalers for the selftest and the tests (the
declarations ``planted.swap``, ``planted.predicate`` and ``planted.scaler`` of
``planted.PLANTED``), sound until a mutant plants a broken implementation (:func:`plant`).

- ``REFERENCE``: a sound swap (float16 to bfloat16), ``torch.is_autocast_enabled(device)``
  as a predicate, ``torch.amp.GradScaler`` as a scaler and a helper around one in the
  manner of timm's ``NativeScaler``; every check passes, on cpu and on a fake cuda device.
- the broken implementations the mutants plant: swaps (:func:`swap_of`), predicates
  (``reads_other``, ``float16_only``, :func:`cached`) and helpers (:func:`helper_of`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers.declare import (
    Predicate,
    RegionSwap,
    Scaler,
    documented_step,
)

#: none needs hardware: each runs on cpu and on a fake cuda device
DEVICES = ("cpu", "cuda")


def _other(device: str) -> str:
    """The device a wrong-device bug reads: CUDA's on cpu (``torch.is_autocast_enabled()``
    without a device), CPU's elsewhere (code written for CPU first)."""
    return "cuda" if device != "cuda" else "cpu"


class DtypeSwap:
    """Switches the device's region to ``to`` while it is on, the region's dtype back on
    exit (in a ``finally``: ``__exit__`` runs on an exception too); one bug each."""

    def __init__(self, device: str, to: torch.dtype = torch.bfloat16, bug: str = ""):
        self.device, self.to, self.bug = device, to, bug

    def __enter__(self) -> DtypeSwap:
        self.prev = torch.get_autocast_dtype(self.device)
        reads = _other(self.device) if self.bug == "reads_other" else self.device
        if torch.is_autocast_enabled(reads):
            torch.set_autocast_dtype(self.device, self.to)
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> bool:
        if not (self.bug == "no_restore_on_error" and exc_type is not None):
            torch.set_autocast_dtype(self.device, self.prev)
        return False


def swap_of(bug: str) -> Callable[[str], contextlib.AbstractContextManager]:
    """A swap with one bug: ``no_restore_on_error``, ``reads_other``, or ``enters`` (the
    swap is ``torch.autocast(device, dtype=bfloat16)``: outside a region it turns autocast
    on)."""
    if bug == "enters":
        return lambda device: torch.autocast(device, dtype=torch.bfloat16)
    return lambda device: DtypeSwap(device, bug=bug)


def _device_type(x: Any) -> str:
    return x.device.type if isinstance(x, torch.Tensor) else torch.device(x).type


def is_autocast_on(x: Any) -> bool:
    return torch.is_autocast_enabled(_device_type(x))


def reads_other(x: Any) -> bool:
    """Asks another device's flag: CUDA's for CPU tensors, CPU's for the others."""
    return torch.is_autocast_enabled(_other(_device_type(x)))


def float16_only(x: Any) -> bool:
    """Answers whether float16 autocast is on: no in a bfloat16 region."""
    d = _device_type(x)
    return torch.is_autocast_enabled(d) and torch.get_autocast_dtype(d) == torch.float16


def cached() -> Callable[[Any], bool]:
    """A predicate that remembers its first answer per device type."""
    seen: dict[str, bool] = {}
    return lambda x: seen.setdefault(_device_type(x), is_autocast_on(x))


class Helper:
    """A helper around a GradScaler in the manner of timm's NativeScaler:
    ``helper(loss, optimizer, clip_grad=None, parameters=None)``; one bug each."""

    def __init__(self, device: str, bug: str = ""):
        self._scaler, self.bug = torch.amp.GradScaler(device), bug

    def __call__(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                 clip_grad: float | None = None, parameters: Any = None) -> None:
        if self.bug == "scales_in_half":
            self._scaler.scale(loss).half().backward()  # 65536 * loss overflows float16
        elif self.bug == "unscaled_backward" and clip_grad is None:
            loss.backward()
        else:
            self._scaler.scale(loss).backward()
        if clip_grad is not None:
            if self.bug == "unscales_twice":  # by hand, and step() unscales again
                inv = 1.0 / self._scaler.get_scale()
                for p in parameters:
                    p.grad.mul_(inv)
            else:
                self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        if self.bug == "never_skips":
            if clip_grad is None:
                self._scaler.unscale_(optimizer)
            optimizer.step()
        else:
            self._scaler.step(optimizer)
        self._scaler.update()

    def state_dict(self) -> dict:
        return self._scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if self.bug != "no_load":
            self._scaler.load_state_dict(state)


def helper_step(scaler: Helper, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                parameters: Any, clip: float | None) -> None:
    scaler(loss, optimizer, clip_grad=clip, parameters=parameters)


def helper_of(bug: str) -> Callable[[str], Helper]:
    """A helper with one bug: ``scales_in_half``, ``unscaled_backward``, ``unscales_twice``,
    ``never_skips`` or ``no_load``."""
    return lambda device: Helper(device, bug)


def _meta() -> dict[str, str]:
    return {"library": "torch", "version": torch.__version__}


REFERENCE = [
    RegionSwap(name="planted.sound_swap", make=lambda d: DtypeSwap(d), devices=DEVICES,
               **_meta()),
    Predicate(name="torch.is_autocast_enabled", answers=is_autocast_on, devices=DEVICES,
              **_meta()),
    Predicate(name="torch.is_autocast_enabled-device_type", answers=is_autocast_on,
              devices=DEVICES, takes="device_type", **_meta()),
    Scaler(name="torch.amp.GradScaler", make=torch.amp.GradScaler, devices=DEVICES, **_meta()),
    Scaler(name="planted.native_scaler", make=Helper, step=helper_step, devices=DEVICES,
           **_meta()),
]

#: the implementations PLANTED delegates to; a mutant plants a broken one
SOUND: dict[str, Callable] = {"swap": lambda d: DtypeSwap(d), "predicate": is_autocast_on,
                              "scaler": torch.amp.GradScaler, "scaler_step": documented_step}
_PLANTED: dict[str, Callable] = dict(SOUND)


def plant(**implementations: Callable) -> Callable[[], None]:
    """Plant broken implementations behind PLANTED; returns the undo."""
    _PLANTED.update(implementations)
    return lambda: _PLANTED.update(SOUND)


def plant_helper(bug: str) -> Callable[[], None]:
    return plant(scaler=helper_of(bug), scaler_step=helper_step)


PLANTED = [
    RegionSwap(name="planted.swap", make=lambda d: _PLANTED["swap"](d), devices=DEVICES,
               **_meta()),
    Predicate(name="planted.predicate", answers=lambda x: _PLANTED["predicate"](x),
              devices=DEVICES, **_meta()),
    Scaler(name="planted.scaler", make=lambda d: _PLANTED["scaler"](d),
           step=lambda *a: _PLANTED["scaler_step"](*a), devices=DEVICES, **_meta()),
]
