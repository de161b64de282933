"""x-transformers' rotary embedding (``pip install x-transformers``): float32 islands made
with its own ``disable_autocast`` decorator, which leaves the autocast of its first tensor
argument's device (x_transformers/x_transformers.py:94-101: ``autocast(tensor_arg.device.type,
enabled = False)``), declared from x-transformers 2.31.10:

- ``RotaryEmbedding(dim).forward(t)`` (:872-891): the frequencies of integer positions
  ``t``, an einsum with the float32 ``inv_freq`` buffer (:851): float32 whatever the region.
- ``apply_rotary_pos_emb(t, freqs)`` (:899-917): the activations ``t`` rotated by the
  frequencies in float32 (``t * freqs.cos()`` promotes), the result cast back to ``t``'s
  dtype (:917: ``out.type(orig_dtype)``). ``freqs`` is what ``RotaryEmbedding`` gives, always
  float32: ``arguments=(None, torch.float32)``.
"""

from __future__ import annotations

import importlib.metadata

import torch
from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

from amp_conformance.checks.wrappers.declare import Float32Island, tensor

VERSION = importlib.metadata.version("x-transformers")
DEVICES = ("cpu", "cuda")


def _positions(device: str) -> tuple[torch.Tensor]:
    return (torch.arange(8, device=device),)


def _rotated(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = tensor(1, 8, 16, device=device, seed=6)
    return tensor(1, 2, 8, 16, device=device), freqs


WRAPPERS = [
    Float32Island(name="x_transformers.RotaryEmbedding", devices=DEVICES,
                  build=lambda device: RotaryEmbedding(16).to(device), inputs=_positions,
                  library="x-transformers", version=VERSION),
    Float32Island(name="x_transformers.apply_rotary_pos_emb", devices=DEVICES,
                  build=lambda device: apply_rotary_pos_emb, inputs=_rotated,
                  arguments=(None, torch.float32), returns="input",
                  library="x-transformers", version=VERSION),
]
