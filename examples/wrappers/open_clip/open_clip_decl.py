"""open_clip's autocast wrapper (``pip install open_clip_torch``; the module
``open_clip_train.precision`` ships in its wheel and imports nothing but torch).

What it claims, from open_clip_torch 3.3.0, ``open_clip_train/precision.py:6-14``:
``get_autocast(precision, device_type='cuda')`` returns
``partial(torch.amp.autocast, device_type=device_type, dtype=...)`` for ``'amp'``
(float16) and ``'amp_bf16'``/``'amp_bfloat16'`` (bfloat16), and ``contextlib.suppress``
(entered with no arguments: a no-op) for every other name. The training loop calls
``get_autocast(args.precision, device_type=device.type)`` and enters ``autocast()``
(open_clip_train/train.py:66, 100), so any device ``torch.autocast`` takes is claimed.

Float32 and unknown names. ``--precision`` accepts ``amp, amp_bf16, amp_bfloat16, bf16,
fp16, pure_bf16, pure_fp16, fp32`` (open_clip_train/params.py:200-205); ``fp32`` means
float32, and ``fp16``/``bf16``/``pure_*`` cast the model itself (no autocast), so every
non-``amp*`` name is a no-op here by design. The function has no documentation of its own
and no check of the name: its single ``else: return suppress`` (precision.py:11-12) is the
design, so an unknown name is declared ``noop``. That is what makes a misspelt precision
(``"amp_bfloat"``) train in float32 without a word when ``get_autocast`` is called directly,
outside the argparse choices; docs/wrappers.md says so, and the ``unknown`` check holds the
wrapper to ``noop`` rather than reporting it as a departure.
"""

from __future__ import annotations

import importlib.metadata

import torch
from open_clip_train.precision import get_autocast

from amp_conformance.checks.wrappers.declare import NOOP, RegionFactory

VERSION = importlib.metadata.version("open_clip_torch")


def make_region(precision: str, device_type: str):
    """What train.py does: ``get_autocast(precision, device_type=...)()``."""
    return get_autocast(precision, device_type=device_type)()


WRAPPERS = [
    RegionFactory(
        name="open_clip.get_autocast",
        make=make_region,
        devices=("cpu", "cuda"),
        precisions={"amp": torch.float16, "amp_bf16": torch.bfloat16,
                    "amp_bfloat16": torch.bfloat16},
        float32_names=("fp32",),
        float32=NOOP,
        unknown=NOOP,  # precision.py:11-12 (see the module docstring)
        decorator=False,  # suppress() is no decorator; nothing documents one
        library="open_clip_torch",
        version=VERSION,
    ),
]
