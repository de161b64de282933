"""ultralytics' autocast (``pip install ultralytics``).

What it claims, from ultralytics 8.4.190, ``ultralytics/utils/torch_utils.py:112-160``:
``autocast(enabled: bool | torch.dtype, device="cuda")`` "Get the appropriate autocast context
manager based on PyTorch version and AMP setting"; ``enabled`` is "Whether to enable AMP, or
the autocast dtype to enable". On torch >= 1.13 it returns
``torch.amp.autocast(device, enabled=bool(enabled), dtype=...)`` (torch_utils.py:137-138,
150, 155-158), the dtype only where ``enabled`` is one, so ``True`` is torch's current
autocast dtype (below). bfloat16 asked for by dtype raises RuntimeError unless the device is
a CUDA device with native bfloat16 (torch_utils.py:139-149, and "Raises: RuntimeError: If
bfloat16 is requested without ... a CUDA device with native bfloat16 support"): by design,
not claimed on CPU.

The trainer enters ``autocast(torch.bfloat16 if self.args.amp == "bf16" else self.amp,
device=self.device.type)`` (ultralytics/engine/trainer.py:542). The precision names here:
``amp`` (``True``), ``float16`` (the dtype) and ``off`` (``False``, float32: autocast off).
``amp`` passes no dtype, so ``torch.amp.autocast`` takes the autocast dtype set when it is
made (``torch.get_autocast_dtype(device_type) if dtype is None``, torch/amp/autocast_mode.py:
233-235): bfloat16 on CPU where nothing else was set, the outer region's dtype inside another
region (``ambient_dtype``). Any other value is taken for its truth (``bool(enabled)``,
torch_utils.py:138): a name it does not know turns autocast on in that same dtype, so
``unknown`` is ``fallback`` to bfloat16 on CPU. The object is a ``torch.autocast``: reusable;
not documented as a decorator. Claimed on CPU only (on CUDA the default dtype is float16
and bfloat16 is accepted).
"""

from __future__ import annotations

import importlib.metadata

import torch
from ultralytics.utils.torch_utils import autocast

from amp_conformance.checks.wrappers.declare import FALLBACK, NOOP, RegionFactory

VERSION = importlib.metadata.version("ultralytics")
VALUES = {"amp": True, "float16": torch.float16, "off": False}


def make_region(precision: str, device_type: str):
    """``autocast(<the value the trainer passes>, device=device_type)``."""
    return autocast(VALUES.get(precision, precision), device=device_type)


WRAPPERS = [
    RegionFactory(
        name="ultralytics.utils.torch_utils.autocast",
        make=make_region,
        devices=("cpu",),
        precisions={"amp": torch.bfloat16,  # torch's default CPU autocast dtype
                    "float16": torch.float16},  # torch_utils.py:137, 150
        ambient_dtype=("amp",),  # no dtype: the one already set (see the module docstring)
        float32_names=("off",),
        float32=NOOP,  # enabled=False
        unknown=FALLBACK,  # torch_utils.py:138: bool(enabled)
        fallback_dtype=torch.bfloat16,
        decorator=False,
        library="ultralytics",
        version=VERSION,
    ),
]
