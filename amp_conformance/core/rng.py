"""The generators a device draws from: seeded for a block, then restored.

Where the device has a ``torch.<device>`` module with ``get_rng_state`` (cuda, xpu, mps, a
PrivateUse1 backend's module) torch forks it; where its generator lives elsewhere the
device's profile names the module (PyTorch/XLA: ``torch_xla.core.xla_model``, whose
``get_rng_state()``/``set_rng_state(seed)`` hold the device's seed); otherwise only the cpu
generator is seeded. Only a generator torch forks (:func:`can_fork`) makes a draw on the device
reproducible from a printed ``torch.manual_seed``: elsewhere samples are drawn on cpu and
moved, and the profile's module seeds only what the calls themselves draw (dropout).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch

from amp_conformance.core import devices

HOST = ("cpu", "meta")


def _module_rng(device: str) -> Any:
    """The module holding the device's generator, where it is not ``torch.<device>``."""
    path = devices.profile(device).rng
    if path is None:
        return None
    try:
        return importlib.import_module(path)
    except ImportError:
        return None


def can_fork(device: str) -> bool:
    """Whether the device draws from a generator torch itself seeds and restores
    (``torch.manual_seed``, ``torch.random.fork_rng``): only then is what it draws
    reproducible from a printed ``torch.manual_seed`` (others draw on cpu and move)."""
    if device in HOST:
        return True
    return hasattr(devices.device_module(device), "get_rng_state")


@contextlib.contextmanager
def seeded(device: str, seed: int) -> Iterator[None]:
    """Inside: the cpu generator and ``device``'s seeded with ``seed``; after: as they were.
    (On cpu only the cpu generator: ``torch.manual_seed`` would also seed every lazy device
    module, at a cost of a millisecond a call.)"""
    if device in HOST or not hasattr(devices.device_module(device), "get_rng_state"):
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            with _module_seeded(device, seed):
                yield
        return
    with torch.random.fork_rng(device_type=device):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _module_seeded(device: str, seed: int) -> Iterator[None]:
    module = None if device in HOST else _module_rng(device)
    if module is None:
        yield
        return
    state = module.get_rng_state()
    module.set_rng_state(seed)
    try:
        yield
    finally:
        module.set_rng_state(state)
