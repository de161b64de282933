"""MONAI's float32 islands (``pip install monai``): a norm wrapped to run in float32 and a
vector quantizer's codebook search, each inside ``torch.autocast("cuda", enabled=False)``.

What they claim, from monai 1.6.1:

- ``monai.networks.utils.CastToFloat(mod)`` (networks/utils.py:1282-1296), "Class used to
  add autocast protection": ``forward(x)`` runs ``mod`` on ``x.to(torch.float32)`` inside
  ``torch.autocast("cuda", enabled=False)`` (:1294) and casts the result back to ``x``'s
  dtype; ``add_casts_around_norms`` (:1403) wraps every LayerNorm, BatchNorm and
  InstanceNorm so. Declared around ``nn.LayerNorm(8)``: a module island returning its
  input's dtype.
- ``EMAQuantizer.quantize(inputs)`` (networks/layers/vector_quantizer.py:90-126): the
  codebook distances (a matrix product) and their arg-min inside
  ``torch.autocast("cuda", enabled=False)`` (:103) on ``inputs.float()``; the flattened
  input and the one-hot encodings come back in float32.

Both leave autocast for CUDA's alone, whatever the tensors' device (docs/wrappers.md).
"""

from __future__ import annotations

import importlib.metadata

import torch
from monai.networks.layers.vector_quantizer import EMAQuantizer
from monai.networks.utils import CastToFloat

from amp_conformance.checks.wrappers.declare import FLOAT32, Float32Island, tensor

VERSION = importlib.metadata.version("monai")
DEVICES = ("cpu", "cuda")


def quantizer(device: str) -> EMAQuantizer:
    torch.manual_seed(0)
    return EMAQuantizer(spatial_dims=2, num_embeddings=16, embedding_dim=8).to(device)


WRAPPERS = [
    Float32Island(name="monai.CastToFloat.LayerNorm", devices=DEVICES,
                  build=lambda device: CastToFloat(torch.nn.LayerNorm(8)).to(device),
                  inputs=lambda device: (tensor(4, 8, device=device),), returns="input",
                  library="monai", version=VERSION),
    Float32Island(name="monai.EMAQuantizer.quantize", devices=DEVICES,
                  build=lambda device: quantizer(device).quantize,
                  inputs=lambda device: (tensor(2, 8, 4, 4, device=device),),
                  returns=(FLOAT32, FLOAT32), library="monai", version=VERSION),
]
