"""A backend module that breaks the process checking it (``--backend-module amp_fault``).

``AMP_FAULT`` names the fault, injected into the AutocastCPU kernel of ``aten::mm`` the
first time it runs: ``exit0`` (``os._exit(0)``), ``abort`` (SIGABRT), ``hang`` (sleeps),
``leak`` (turns xpu autocast on and never off), ``raise`` (a RuntimeError at import),
``sysexit`` (``sys.exit(3)`` at import), ``lost`` (the first call returns and "loses the
device": every later call, and :func:`probe`, raises :data:`LOST`, as a CUDA context does
after a device-side assert; ``amp_fault_health`` declares the probe to the suite).
"""

import os
import signal
import sys
import time

import torch

FAULT = os.environ.get("AMP_FAULT", "")

if FAULT == "raise":
    raise RuntimeError("no driver found for the fake accelerator")
if FAULT == "sysexit":
    sys.exit(3)

_LIB = torch.library.Library("aten", "IMPL")
_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
#: the backend's own words for its lost device
LOST = "FAULT: device lost (sticky)"
_STATE = {"lost": False, "probes": 0}


def probe():
    """The backend's health probe: raises once the device is lost."""
    _STATE["probes"] += 1
    if _STATE["lost"]:
        raise RuntimeError(LOST)


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


if FAULT in ("exit0", "abort", "hang", "leak", "lost"):
    _LIB.impl("mm", _mm, "AutocastCPU")
