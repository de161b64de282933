"""Ops quarantined for losing the device: calls of them stopped before they reach it.

A kernel that loses the device on every call (a young backend's common bug) would cost one
fresh process per item that calls it. Once the health probe blames an op (``… in
aten::baddbmm``), every overload of it is fenced: a call with an argument on the device
raises :class:`Quarantined` instead of reaching the faulty kernel, so an item that calls
the op stops before it touches the device (the plugin reports it *not run*, grouped by op)
and every other item runs and gets its verdict. Which op an item calls is not guessed from
its name: whatever reaches the op (a composite, a device-generic check, a property) meets
the fence.

The fence sits above every dispatch key a backend registers on (``core.dispatch``), so it
holds however the faulty kernel is registered: per op in C++ or from Python, as a boxed
fallback, or inside a Python dispatch mode. It holds in the item's thread (and autograd's);
where torch lets the device's own kernels be replaced (a per-op kernel under its Autocast
or backend key), they are replaced too, which holds in every thread.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings

import torch
from torch.utils._pytree import tree_leaves

from amp_conformance.core import devices, dispatch

PREFIX = "aten::"


class Quarantined(RuntimeError):
    """A call of a quarantined op: it would have lost the device."""


#: the ops whose guard fired since :func:`reset` (the plugin reads it per item)
_TOUCHED: list[str] = []
_GUARDED: dict[str, torch.library.Library] = {}


def op_name(blamed: str) -> str:
    """``aten::baddbmm.out`` -> ``baddbmm``: the op a probe's blame names."""
    return blamed.removeprefix(PREFIX).partition(".")[0]


def _keys(device: str) -> tuple[str, str]:
    """The device's Autocast key and its backend key (``AutocastXLA`` and ``XLA``)."""
    autocast = devices.dispatch_key(device)
    return autocast, autocast.removeprefix("Autocast")


def guard(device: str, blamed: str) -> bool:
    """Quarantine the op ``blamed`` names on ``device``; whether it was newly fenced (an
    op without overloads here, or already quarantined, is not)."""
    name = op_name(blamed)
    if name in _GUARDED:
        return False
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    why = (f"{PREFIX}{name} is quarantined on {device}: it lost the device earlier in this "
           "run, so an item that calls it is not run")

    def stop() -> None:
        _TOUCHED.append(f"{PREFIX}{name}")
        raise Quarantined(why)

    def check(overload: str, args: tuple, kwargs: dict) -> None:
        if _touches(device, args, kwargs):
            stop()

    def kernel(*args, **kwargs):
        stop()

    overloads = [f"{PREFIX}{name}" + ("" if o == "default" else f".{o}") for o in packet.overloads()]
    dispatch.fence(overloads, check)
    _GUARDED[name] = _replace(overloads, _keys(device), kernel)
    return True


def _touches(device: str, args: tuple, kwargs: dict) -> bool:
    """Whether a call has a tensor (or names a device) of type ``device``."""
    if isinstance(kwargs.get("device"), str) and kwargs["device"].split(":")[0] == device:
        return True
    return any((isinstance(x, torch.Tensor) and x.device.type == device)
               or (isinstance(x, torch.device) and x.type == device)
               for x in tree_leaves((args, kwargs)))


def _replace(overloads: list[str], keys: tuple[str, ...], kernel) -> torch.library.Library:
    """Replace the overloads' kernels under ``keys`` where torch lets them be replaced (not a
    boxed fallback; a Python kernel only where ``allow_override`` exists)."""
    lib = torch.library.Library("aten", "IMPL")
    override = ({"allow_override": True}
                if "allow_override" in inspect.signature(lib.impl).parameters else {})
    for full in overloads:
        for key in keys:
            try:
                if not torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
                    lib.impl(full.removeprefix(PREFIX), kernel, key, **override)
            except RuntimeError:  # a kernel torch will not hide: the fence alone holds
                continue
    return lib


def fenced() -> contextlib.AbstractContextManager:
    """The quarantine holds inside the block (the plugin enters it around each item)."""
    return dispatch.fenced()


def touched() -> list[str]:
    """The quarantined ops called since :func:`reset`, in order, once each."""
    return list(dict.fromkeys(_TOUCHED))


def reset() -> None:
    _TOUCHED.clear()


def release() -> None:
    """Remove every fence and replacement (the device's own kernels are back)."""
    dispatch.unfence()
    while _GUARDED:
        _GUARDED.popitem()[1]._destroy()
    reset()
