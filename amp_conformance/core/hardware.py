"""What the running machine can do, probed, never assumed from the machine a list was written on.

The autocast *policy* is the same on every machine; whether the kernel below autocast
exists is not. On x86 CPUs without AVX-512 (AVX2 only, e.g. AMD EPYC here) oneDNN has no
bfloat16 LSTM primitive, and without AVX512-FP16/AMX no float16 one: ``torch.lstm`` under
CPU autocast takes the oneDNN path (``aten::mkldnn_rnn_layer``) and raises. An op-list
skip names a probe (``skip = [{requires = "onednn_lstm", check = [...], reason = "..."}]``)
and applies exactly where the probe fails on the running machine.

Each probe runs once per process (cached) and returns why the feature is missing for an
autocast dtype (printed with the skip), or None where it is present.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import torch

from amp_conformance.core.state import AutocastState

#: the oneDNN error of a missing LSTM primitive (the only error the probe reads as "absent");
#: oneDNN before torch 2.7 says "an LSTM", later "the LSTM"
NO_LSTM_PRIMITIVE = "could not create a primitive descriptor for the LSTM forward propagation primitive"
_NO_LSTM = re.compile(r"could not create a primitive descriptor for (an|the) LSTM forward "
                      r"propagation primitive")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@functools.cache
def onednn_lstm(amp_dtype: torch.dtype) -> str | None:
    """Why this CPU cannot run torch.lstm under CPU autocast in ``amp_dtype``, or None."""
    if not torch.backends.mkldnn.is_available():
        return None  # the native path runs everywhere
    module = torch.nn.LSTM(2, 2)
    before = AutocastState.capture("cpu")  # a probe leaves no trace, even under a broken autocast
    try:
        with torch.autocast("cpu", dtype=amp_dtype):
            module(torch.zeros(1, 1, 2))
    except RuntimeError as exc:
        if not _NO_LSTM.match(str(exc)):
            raise
        return (f"this CPU ({torch.backends.cpu.get_cpu_capability()}) has no oneDNN "
                f"{_dtype_name(amp_dtype)} LSTM primitive: under CPU autocast torch.lstm takes "
                f"the oneDNN path (aten::mkldnn_rnn_layer) and raises '{NO_LSTM_PRIMITIVE}'")
    finally:
        before.restore()
    return None


#: probe name (the value of an op-list skip's ``requires``) -> probe
PROBES: dict[str, Callable[[torch.dtype], str | None]] = {
    "onednn_lstm": onednn_lstm,
}


def missing(name: str, amp_dtype: torch.dtype) -> str | None:
    """Why the feature ``name`` is absent on this machine for ``amp_dtype``, or None."""
    return PROBES[name](amp_dtype)


def describe_machine() -> str:
    """One line for reports and docs: the CPU capability torch dispatches to."""
    return f"cpu capability {torch.backends.cpu.get_cpu_capability()}"
