"""A backend module that breaks the process checking it (``--backend-module amp_fault``).

``AMP_FAULT`` names the fault, injected into the AutocastCPU kernel of ``aten::mm`` the
first time it runs: ``exit0`` (``os._exit(0)``), ``abort`` (SIGABRT), ``hang`` (sleeps),
``leak`` (turns xpu autocast on and never off), ``raise`` (a RuntimeError at import),
``sysexit`` (``sys.exit(3)`` at import), ``lost`` (the first call returns and "loses the
device": every later call, and :func:`probe`, raises :data:`LOST`, as a CUDA context does
after a device-side assert; ``amp_fault_health`` declares the probe to the suite).

Two more are a young backend's common case, a kernel bug that is not a one-off:
``persistent`` loses the device on every call of each AutocastCPU kernel that
``AMP_FAULT_OPS`` names (comma-separated, default ``baddbmm``), in every process; the probe
then blames the op (``… in aten::baddbmm``). ``dead``: the device dies at its first use in
every process (the probe passes once, before any item ran, and raises ever after).
``AMP_FAULT_KIND`` says how the persistent fault's kernels are registered: ``kernel``
(default: a per-op AutocastCPU kernel from ``torch.library``) or ``mode`` (the backend runs
its ops through a Python dispatch mode, active from its import, that loses the device at
those ops). ``AMP_FAULT_LOG=PATH`` appends the item running (``PYTEST_CURRENT_TEST``) at each call of a
faulty kernel, so a test knows which items call it.
"""

import os
import signal
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _push_mode

FAULT = os.environ.get("AMP_FAULT", "")
KIND = os.environ.get("AMP_FAULT_KIND", "kernel")
OPS = [op for op in os.environ.get("AMP_FAULT_OPS", "baddbmm").split(",") if op]

if FAULT == "raise":
    raise RuntimeError("no driver found for the fake accelerator")
if FAULT == "sysexit":
    sys.exit(3)

_LIB = torch.library.Library("aten", "IMPL")
_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
#: the backend's own words for its lost device
LOST = "FAULT: device lost (sticky)"
_STATE = {"lost": False, "probes": 0, "op": None}


def probe():
    """The backend's health probe: raises once the device is lost, naming the op that lost it."""
    _STATE["probes"] += 1
    if FAULT == "dead" and _STATE["probes"] > 1:
        _STATE["lost"] = True
    if _STATE["lost"]:
        raise RuntimeError(LOST + (f" in aten::{_STATE['op']}" if _STATE["op"] else ""))


def _mm(a, b):
    if FAULT == "lost":
        if _STATE["lost"]:
            raise RuntimeError(LOST)
        _STATE["lost"] = True
    if FAULT == "exit0":
        os._exit(0)
    if FAULT == "abort":
        os.kill(os.getpid(), signal.SIGABRT)
    if FAULT == "hang":
        time.sleep(3600)
    if FAULT == "leak":
        torch.set_autocast_enabled("xpu", True)
    with torch._C._ExcludeDispatchKeyGuard(_KEYS):
        dtype = torch.get_autocast_dtype("cpu")
        return torch.mm(a.to(dtype), b.to(dtype))


def _log() -> None:
    path = os.environ.get("AMP_FAULT_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0] + "\n")


def _lose(name: str) -> None:
    """A call of a faulty op: the first loses the device, every later one finds it lost."""
    _log()
    if _STATE["lost"]:
        raise RuntimeError(f"{LOST} in aten::{_STATE['op']}")
    _STATE["lost"], _STATE["op"] = True, name


def _faulty(name):
    """A lower-precision AutocastCPU kernel for ``aten::name`` that loses the device."""
    op = getattr(torch.ops.aten, name).default

    def cast(x):
        ok = isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64
        return x.to(torch.get_autocast_dtype("cpu")) if ok else x

    def kernel(*args, **kwargs):
        _lose(name)
        with torch._C._ExcludeDispatchKeyGuard(_KEYS):
            return op(*[cast(a) for a in args], **kwargs)

    return kernel


class _Backend(TorchDispatchMode):
    """A backend that runs every op through Python: the faulty ones lose the device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in OPS:
            _lose(name)
        return func(*args, **(kwargs or {}))


if FAULT in ("exit0", "abort", "hang", "leak", "lost"):
    _LIB.impl("mm", _mm, "AutocastCPU")
if FAULT == "persistent" and KIND == "mode":
    _push_mode(_Backend())
elif FAULT == "persistent":
    for _name in OPS:
        _LIB.impl(_name, _faulty(_name), "AutocastCPU")
