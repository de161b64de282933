"""accelerate's autocast wrappers (``pip install accelerate``).

What they claim, from accelerate 1.15.0:

- ``Accelerator(mixed_precision=..., cpu=...).autocast()`` (accelerate/accelerator.py:
  4218-4241): "Will apply automatic mixed-precision inside the block inside this context
  manager, if it is enabled. Nothing different will happen otherwise." ``mixed_precision`` is
  documented as one of ``'no'``, ``'fp16'``, ``'bf16'``, ``'fp8'`` (accelerator.py:193-197);
  an unknown name raises ValueError (accelerator.py:316). So ``'no'`` leaves autocast off,
  ``'bf16'`` is bfloat16 and ``'fp16'`` float16 (the docstring's own example is
  ``Accelerator(mixed_precision="fp16")`` with ``accelerator.autocast()``, accelerator.py:
  4232). ``'fp8'`` needs transformer_engine or MS-AMP and is not claimed here.
- ``accelerate.utils.get_mixed_precision_context_manager(native_amp, autocast_kwargs)``
  (accelerate/utils/modeling.py:2078-2117): "a context manager for autocasting mixed
  precision"; ``native_amp`` is "Whether mixed precision is actually enabled": with it,
  ``torch.autocast`` on the state's device in the state's ``mixed_precision`` dtype, without
  it a ``nullcontext``. Declared here as documented, apart from ``Accelerator``'s own choice
  of ``native_amp``: the state set up by ``Accelerator(mixed_precision=name)`` (the only way
  accelerate lets a state be made, state.py:950-954), and ``native_amp`` true for a mixed
  name, false for ``'no'``.

accelerate keeps one process-wide state (accelerate/state.py:1049-1060: a second
``Accelerator`` with another ``mixed_precision`` raises), so each region here resets it
first with ``AcceleratorState._reset_state(True)`` — the private method accelerate's own
tests use — and builds the state when the region is entered.
"""

from __future__ import annotations

import importlib.metadata
from contextlib import AbstractContextManager

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import get_mixed_precision_context_manager

from amp_conformance.checks.wrappers.declare import ERROR, NOOP, RegionFactory

VERSION = importlib.metadata.version("accelerate")
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


class _Fresh(AbstractContextManager):
    """A region that resets accelerate's state and builds the wrapper's context on entry."""

    def __init__(self, build):
        self._build, self._cm = build, None

    def __enter__(self):
        AcceleratorState._reset_state(True)
        self._cm = self._build()
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def accelerator_autocast(precision: str, device_type: str):
    return _Fresh(lambda: Accelerator(mixed_precision=precision,
                                      cpu=device_type == "cpu").autocast())


def mixed_precision_context_manager(precision: str, device_type: str):
    def build():
        # the state comes from an Accelerator only (state.py:950-954 refuses another way)
        Accelerator(mixed_precision=precision, cpu=device_type == "cpu")
        return get_mixed_precision_context_manager(native_amp=precision != "no")
    return _Fresh(build)


WRAPPERS = [
    RegionFactory(
        name="accelerate.Accelerator.autocast",
        make=accelerator_autocast,
        devices=("cpu", "cuda"),
        precisions=PRECISIONS,  # accelerator.py:193-197 and 4232 (see the module docstring)
        float32_names=("no",),
        float32=NOOP,
        unknown=ERROR,  # accelerator.py:316
        decorator=False,  # not documented as a decorator
        library="accelerate",
        version=VERSION,
    ),
    RegionFactory(
        name="accelerate.utils.get_mixed_precision_context_manager",
        make=mixed_precision_context_manager,
        devices=("cpu", "cuda"),
        precisions=PRECISIONS,  # modeling.py:2097-2113
        float32_names=("no",),
        float32=NOOP,  # modeling.py:2116-2117: nullcontext without native_amp
        unknown=ERROR,  # Accelerator refuses the name (accelerator.py:316)
        decorator=False,
        library="accelerate",
        version=VERSION,
    ),
]
