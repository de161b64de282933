"""Ops quarantined for losing the device: their kernels replaced by ones that raise.

A kernel that loses the device on every call (a young backend's common bug) would cost one
fresh process per item that calls it. Once the health probe blames an op (``… in
aten::baddbmm``), every overload of it gets, under the device's Autocast key and under its
backend key, a kernel that raises :class:`Quarantined` instead of reaching the faulty one:
an item that calls the op stops before it touches the device (the plugin reports it *not
run*, grouped by op), every other item runs and gets its verdict. Which op an item calls is
not guessed from its name: whatever reaches the op (a composite, a device-generic check, a
property) meets the guard.
"""

from __future__ import annotations

import warnings

import torch

from amp_conformance.core import devices

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
    """Quarantine the op ``blamed`` names on ``device``; whether a guard was installed (an
    op without overloads here, or already guarded, gets none)."""
    name = op_name(blamed)
    if name in _GUARDED:
        return False
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return False
    why = (f"{PREFIX}{name} is quarantined on {device}: it lost the device earlier in this "
           "run, so an item that calls it is not run")

    def kernel(*args, **kwargs):
        _TOUCHED.append(f"{PREFIX}{name}")
        raise Quarantined(why)

    lib = torch.library.Library("aten", "IMPL")
    installed = False
    for overload in packet.overloads():
        full = f"{PREFIX}{name}" + ("" if overload == "default" else f".{overload}")
        for key in _keys(device):
            try:
                if not torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
                    lib.impl(full.removeprefix(PREFIX), kernel, key)
                installed = True
            except RuntimeError:  # a kernel registered from Python that torch will not hide
                continue
    if not installed:
        lib._destroy()
        return False
    _GUARDED[name] = lib
    return True


def touched() -> list[str]:
    """The quarantined ops called since :func:`reset`, in order, once each."""
    return list(dict.fromkeys(_TOUCHED))


def reset() -> None:
    _TOUCHED.clear()


def release() -> None:
    """Remove every guard (the device's own kernels are back)."""
    while _GUARDED:
        _GUARDED.popitem()[1]._destroy()
    reset()
