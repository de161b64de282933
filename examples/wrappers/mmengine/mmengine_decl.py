"""mmengine's autocast (``pip install mmengine``).

What it claims, from mmengine 0.10.7, ``mmengine/runner/amp.py``:

- ``autocast(device_type=None, dtype=None, enabled=True, cache_enabled=None)`` (amp.py:15-20):
  "A wrapper of ``torch.autocast`` and ``toch.cuda.amp.autocast``" that "provides a unified
  interface"; "We suggest users using this function in the code to achieve maximized
  compatibility". On torch >= 1.10 it enters ``torch.autocast(device_type, enabled, dtype,
  cache_enabled)`` (amp.py:156-160), ``device_type`` defaulting to mmengine's current device
  (amp.py:115) and ``cache_enabled`` to torch's current flag (amp.py:113). On CPU, ``dtype=None``
  means bfloat16 (amp.py:129) and any other dtype fails mmengine's own assertion "In CPU
  autocast, only support `torch.bfloat16` dtype" (amp.py:130-131): float16 and float32
  raise there by design (older than torch 2.2's CPU float16 autocast).
- What a user reaches: ``AmpOptimWrapper(dtype=...)`` enters ``autocast(dtype=self.cast_dtype)``
  (mmengine/optim/optimizer/amp_optimizer_wrapper.py:188-189), the dtype given as a torch
  dtype, a name (``'float16'``, ``'bfloat16'``, ``'float32'``, ``'float64'``, converted with
  ``getattr(torch, name)``, amp_optimizer_wrapper.py:109-113) or None. The precision names
  here are those names (``default`` for None); a name that is no torch dtype reaches
  ``autocast`` as it is, where the CPU assertion refuses it.

``autocast`` is a generator-based context manager (``@contextmanager``, amp.py:15): one
region object is entered once (``single_use``). It is not documented as a decorator.
Claimed on CPU only: on CUDA its precisions differ (float16 allowed, bfloat16 where the
device supports it) and would need a declaration of their own.
"""

from __future__ import annotations

import importlib.metadata

import torch
from mmengine.runner.amp import autocast

from amp_conformance.checks.wrappers.declare import ERROR, RegionFactory

VERSION = importlib.metadata.version("mmengine")


def make_region(precision: str, device_type: str):
    """``autocast(device_type=..., dtype=...)`` with the dtype AmpOptimWrapper would pass."""
    dtype = None if precision == "default" else getattr(torch, precision, precision)
    return autocast(device_type=device_type, dtype=dtype)


WRAPPERS = [
    RegionFactory(
        name="mmengine.runner.amp.autocast",
        make=make_region,
        devices=("cpu",),
        precisions={"bfloat16": torch.bfloat16,
                    "default": torch.bfloat16},  # amp.py:128-129: None is bfloat16 on CPU
        float32_names=("float32",),
        float32=ERROR,  # amp.py:130-131: only bfloat16 on CPU
        unknown=ERROR,  # the same assertion
        decorator=False,
        single_use="a @contextmanager generator (mmengine/runner/amp.py:15)",
        library="mmengine",
        version=VERSION,
    ),
]
