"""speechbrain's autocast wrappers (``pip install speechbrain``; it needs torchaudio).

What they claim, from ``speechbrain/utils/autocast.py`` of speechbrain 1.1.2:

- ``TorchAutocast(*args, **kwargs)`` (autocast.py:56-131) "conditionally enables
  ``torch.autocast``": autocast when ``dtype`` is not float32, a no-op context manager
  otherwise (autocast.py:76-81); every argument goes to ``torch.autocast``, so it works on
  whatever device ``torch.autocast`` does. Brain (speechbrain/core.py) builds it from
  ``AMPConfig.from_name(precision)`` (autocast.py:29-53): ``fp32`` (and None) -> float32,
  ``fp16``, ``bf16``, anything else -> ValueError. So: ``fp32`` leaves autocast off, an
  unknown name raises.
- ``fwd_default_precision(fwd=None, cast_inputs=torch.float32)`` (autocast.py:167-252):
  "much like ``torch.amp.custom_fwd``": autocast off inside the forward and floating inputs
  cast to ``cast_inputs``; the wrapped forward gains ``force_allow_autocast``, which skips
  both. Its docstring says (autocast.py:182-183) "This decorator now supports both CPU and
  CUDA by using ``torch.amp.custom_fwd`` with the device_type inferred from input tensors"
  — so it claims to cast on CPU too (older releases documented CUDA only; this declaration
  follows the installed release's documentation).

Importing ``speechbrain.utils.autocast`` runs ``speechbrain/__init__.py``, which imports
torchaudio (speechbrain/utils/torch_audio_backend.py:12): without a torchaudio built for the
installed torch, this module does not import; the registry has no torchaudio for torch 2.13,
so its nox session runs torch 2.11.0 with torchaudio 2.11.0.
"""

from __future__ import annotations

import importlib.metadata

import torch
from speechbrain.utils.autocast import AMPConfig, TorchAutocast, fwd_default_precision

from amp_conformance.checks.wrappers.declare import ERROR, NOOP, ForwardDecorator, RegionFactory

VERSION = importlib.metadata.version("speechbrain")


def make_region(precision: str, device_type: str):
    """What Brain does: ``TorchAutocast(device_type=..., dtype=AMPConfig.from_name(p).dtype)``."""
    return TorchAutocast(device_type=device_type, dtype=AMPConfig.from_name(precision).dtype)


WRAPPERS = [
    RegionFactory(
        name="speechbrain.TorchAutocast",
        make=make_region,
        devices=("cpu", "cuda"),
        precisions={"fp16": torch.float16, "bf16": torch.bfloat16},
        float32_names=("fp32",),
        float32=NOOP,  # autocast.py:77-81: a nullcontext for float32
        unknown=ERROR,  # autocast.py:50-53: ValueError for a name it does not know
        decorator=False,  # not documented as a decorator (and a plain class, no __call__)
        library="speechbrain",
        version=VERSION,
    ),
    ForwardDecorator(
        name="speechbrain.fwd_default_precision",
        decorate=fwd_default_precision,  # the default cast_inputs=torch.float32
        cast_dtype=torch.float32,
        casts_on=("cpu", "cuda"),  # autocast.py:182-183 (see the module docstring)
        devices=("cpu", "cuda"),
        disables_autocast=True,  # "by default, *disables* autocast" (autocast.py:171)
        extra_kwargs={"force_allow_autocast": False},  # autocast.py:227
        library="speechbrain",
        version=VERSION,
    ),
]
