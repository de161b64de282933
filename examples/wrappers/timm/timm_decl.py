"""timm's loss scaler, autocast predicate and a float32 island (``pip install timm``): a
scaler, a predicate and an island, each used by timm's own training script and layers.

What they claim, from timm 1.0.31:

- ``timm.utils.NativeScaler`` (utils/cuda.py:46-78): a helper around
  ``torch.amp.GradScaler(device=device)`` (:51; ``device='cuda'`` by default, so it is made
  for the run's device here): ``scaler(loss, optimizer, clip_grad=None, parameters=None)``
  scales and backpropagates the loss, with ``clip_grad`` unscales (:69) and clips, then
  ``GradScaler.step`` and ``update`` (:71-72); ``state_dict``/``load_state_dict`` are the
  GradScaler's (:74-78). Held to the gradscaler family's training orders.
- ``timm.layers.fast_norm.is_autocast_enabled(device='cuda')`` (layers/fast_norm.py:45-54):
  ``torch.is_autocast_enabled(device)`` for a device type, the old per-device functions
  before torch 2.4. A predicate taking a device type, as its callers pass
  ``x.device.type`` (:77).
- ``timm.layers.get_mixed_freqs(freqs, t_x, t_y)`` (layers/pos_embed_sincos.py:1001-1023):
  "Compute angles and sin/cos in float32, including under autocast. By default the output
  uses the freqs dtype." A function island returning its first input's dtype.
"""

from __future__ import annotations

import importlib.metadata

import torch
from timm.layers import get_mixed_freqs
from timm.layers.fast_norm import is_autocast_enabled
from timm.utils import NativeScaler

from amp_conformance.checks.wrappers.declare import Float32Island, Predicate, Scaler, tensor

VERSION = importlib.metadata.version("timm")
DEVICES = ("cpu", "cuda")


def native_step(scaler: NativeScaler, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                parameters: list, clip: float | None) -> None:
    """One step as timm's train.py takes it: ``loss_scaler(loss, optimizer, clip_grad=...,
    parameters=...)``."""
    scaler(loss, optimizer, clip_grad=clip, parameters=parameters)


def freqs_inputs(device: str) -> tuple[torch.Tensor, ...]:
    """Frequencies (2, head_dim // 2) and 16 positions on each axis."""
    return (tensor(2, 4, device=device), tensor(16, device=device, seed=6) * 8,
            tensor(16, device=device, seed=7) * 8)


WRAPPERS = [
    Scaler(name="timm.NativeScaler", make=lambda device: NativeScaler(device=device),
           step=native_step, devices=DEVICES, library="timm", version=VERSION),
    Predicate(name="timm.fast_norm.is_autocast_enabled", answers=is_autocast_enabled,
              takes="device_type", devices=DEVICES, library="timm", version=VERSION),
    Float32Island(name="timm.get_mixed_freqs", devices=DEVICES,
                  build=lambda device: get_mixed_freqs, inputs=freqs_inputs, returns="input",
                  library="timm", version=VERSION),
]
