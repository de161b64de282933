"""rotary-embedding-torch's float32 island (``pip install rotary-embedding-torch``): the
rotary frequencies, computed under ``@autocast('cuda', enabled = False)``.

What it claims, from rotary-embedding-torch 0.9.1:

- ``RotaryEmbedding.forward(t, seq_len=None, offset=0)``
  (rotary_embedding_torch/rotary_embedding_torch.py:319-351) is decorated with
  ``@autocast('cuda', enabled = False)`` (:319, ``from torch.amp import autocast``, :5) and
  computes the frequencies as ``einsum('..., f -> ... f', t.type(freqs.dtype), freqs)``
  (:343), the positions cast to the frequencies' dtype (float32) first: the frequencies
  are meant to be computed outside autocast, in float32. A module island returning
  float32.

The decorator names CUDA whatever the tensors' device (docs/wrappers.md).
"""

from __future__ import annotations

import importlib.metadata

import torch
from rotary_embedding_torch import RotaryEmbedding

from amp_conformance.checks.wrappers.declare import Float32Island

VERSION = importlib.metadata.version("rotary-embedding-torch")
DEVICES = ("cpu", "cuda")


def positions(device: str) -> tuple[torch.Tensor, ...]:
    return (torch.arange(16, device=device).float(),)


WRAPPERS = [
    Float32Island(name="rotary_embedding_torch.RotaryEmbedding", devices=DEVICES,
                  build=lambda device: RotaryEmbedding(dim=8).to(device), inputs=positions,
                  library="rotary-embedding-torch", version=VERSION),
]
