"""A device's pending errors, drained: an asynchronous device reports an error at the next
synchronize or read-back, and a failed kernel may leave it in an error state until then.

The per-item isolation drains the device at the end of every item, so a late error is the
item's that caused it, never the next one's; an excuse's proof drains it before its
rerun, so the rerun starts on a device in a clean state, or is refused where the device
cannot be brought back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from amp_conformance.core import devices

#: synchronizes a device that still fails after this many are not brought back
ATTEMPTS = 3


#: device -> its declared step boundary (capability ``step_boundary``), for this run
_STEP_BOUNDARIES: dict[str, Callable[[], object]] = {}


def declare_step_boundary(device: str, boundary: Callable[[], object] | None) -> None:
    """A lazy device's end of a training step (None: the declaration withdrawn). Only the
    checks that train call it (``Target.end_step``): it runs the pending graph of every
    live tensor, which a synchronize of the device must not (a value an item keeps alive
    that its device cannot compute is no error of the item that synchronizes)."""
    if boundary is None:
        _STEP_BOUNDARIES.pop(device, None)
    else:
        _STEP_BOUNDARIES[device] = boundary


def step_boundary(device: str) -> Callable[[], object] | None:
    return _STEP_BOUNDARIES.get(device)


@functools.cache
def synchronizer(device: str) -> Callable[[], None] | None:
    """The device's synchronize that works, chosen at its first call (the isolation asks
    before its first item runs): ``torch.accelerator``'s where the device is the current
    accelerator, else its device module's; None for cpu and meta, for a device that is not
    here (faked), and for one with neither that works (it reports nothing late)."""
    if device in ("cpu", "meta") or not devices.is_available(device):
        return None
    candidates = [getattr(getattr(torch, device, None), "synchronize", None)]
    if torch.accelerator.is_available() and torch.accelerator.current_accelerator().type == device:
        candidates.insert(0, torch.accelerator.synchronize)
    for sync in candidates:
        if not callable(sync):
            continue
        try:
            sync()
        except Exception:  # noqa: BLE001 - a synchronize the backend does not support
            continue
        return sync
    return None


def pending(device: str) -> BaseException | None:
    """The error the device reports at a synchronize now (drained), or None."""
    sync = synchronizer(device)
    if sync is None:
        return None
    try:
        sync()
    except Exception as exc:  # noqa: BLE001 - the device's own error, whatever its class
        return exc
    return None


def recover(device: str) -> tuple[list[BaseException], bool]:
    """Synchronize until the device reports nothing (at most :data:`ATTEMPTS` times): the
    errors it reported, and whether it came back clean."""
    errors = []
    for _ in range(ATTEMPTS):
        error = pending(device)
        if error is None:
            return errors, True
        errors.append(error)
    return errors, False
