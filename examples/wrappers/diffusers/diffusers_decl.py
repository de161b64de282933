"""diffusers' float32 islands: rotary and timestep embeddings computed in float32 whatever
the autocast region (``pip install diffusers``). Each is built from its constructor, tiny,
no weights downloaded.

What they claim, from diffusers 0.42.1 (paths under ``diffusers/models/transformers/``):

- ``OmniGenSuScaledRotaryEmbedding.forward`` (transformer_omnigen.py:153-183): "Force
  float32 since bfloat16 loses precision on long contexts": the frequencies are computed
  inside ``torch.autocast(device_type, enabled=False)`` on float32 operands; cos and sin
  come back in float32.
- ``rope(pos, dim, theta)`` (transformer_ernie_image.py:46-55): "Disable autocast so the
  position-id einsum runs in float32"; the result is ``.float()``.
- ``MochiRoPE._create_rope(freqs, pos)`` (transformer_mochi.py:285-292): "Always run ROPE
  freqs computation in FP32", inside ``torch.autocast(device, torch.float32)``: on CPU torch
  refuses that dtype and turns autocast off instead (with a warning on every call), which
  keeps the einsum in float32 all the same.
- ``TimestepEmbedder.timestep_embedding(t, dim)`` (transformer_z_image.py:53-64): the
  sinusoidal embedding inside ``torch.amp.autocast("cuda", enabled=False)``, whatever the
  tensors' device: on CPU it leaves CPU autocast on and turns CUDA's off (docs/wrappers.md;
  ``defects/zimage_timestep_cuda_island.py``).
"""

from __future__ import annotations

import importlib.metadata

import torch
from diffusers.models.transformers.transformer_ernie_image import rope
from diffusers.models.transformers.transformer_mochi import MochiRoPE
from diffusers.models.transformers.transformer_omnigen import OmniGenSuScaledRotaryEmbedding
from diffusers.models.transformers.transformer_z_image import TimestepEmbedder

from amp_conformance.checks.wrappers.declare import Float32Island, tensor

VERSION = importlib.metadata.version("diffusers")
DEVICES = ("cpu", "cuda")


def omnigen(device: str) -> OmniGenSuScaledRotaryEmbedding:
    return OmniGenSuScaledRotaryEmbedding(
        8, max_position_embeddings=64, original_max_position_embeddings=32,
        rope_scaling={"short_factor": [1.0] * 4, "long_factor": [2.0] * 4}).to(device)


def positions(device: str) -> torch.Tensor:
    return torch.arange(40, device=device)[None]


WRAPPERS = [
    Float32Island(
        name="diffusers.OmniGenSuScaledRotaryEmbedding",
        devices=DEVICES, build=omnigen,
        inputs=lambda device: (tensor(1, 40, 8, device=device), positions(device)),
        library="diffusers", version=VERSION,
    ),
    Float32Island(
        name="diffusers.ernie_image.rope",
        devices=DEVICES, build=lambda device: rope,
        inputs=lambda device: (positions(device).float(), 8, 10000),
        library="diffusers", version=VERSION,
    ),
    Float32Island(
        name="diffusers.MochiRoPE._create_rope",
        devices=DEVICES, build=lambda device: MochiRoPE()._create_rope,
        inputs=lambda device: (tensor(3, 2, 4, device=device), tensor(5, 3, device=device, seed=6)),
        library="diffusers", version=VERSION,
    ),
    Float32Island(
        name="diffusers.z_image.TimestepEmbedder.timestep_embedding",
        devices=DEVICES, build=lambda device: TimestepEmbedder.timestep_embedding,
        inputs=lambda device: (torch.tensor([1.0, 500.0], device=device), 16),
        library="diffusers", version=VERSION,
    ),
]
