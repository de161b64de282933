"""vector-quantize-pytorch's float32 island (``pip install vector-quantize-pytorch``): the
finite scalar quantizer's quantization step, forced to full precision.

What it claims, from vector-quantize-pytorch 1.32.0:

- ``FSQ(levels, force_quantization_f32=True)`` (vector_quantize_pytorch/
  finite_scalar_quantization.py:64-130; the flag is on by default, :76): "whether to force
  quantization step to be full precision or not" (:274): the step runs inside
  ``autocast('cuda', enabled = False)`` (:277, ``from torch.amp import autocast``, :15), its
  input cast to float32 unless already float32 or float64 (``allowed_dtypes``, :72, :282),
  and the codes cast back to the input's dtype (:303). Declared with ``dim`` equal to the
  codebook dimension (no projection in or out, as FSQ makes them identities then): a
  module island returning its input's dtype, and the integer indices.

The context names CUDA whatever the tensors' device (docs/wrappers.md).
"""

from __future__ import annotations

import importlib.metadata

from vector_quantize_pytorch import FSQ

from amp_conformance.checks.wrappers.declare import Float32Island, tensor

VERSION = importlib.metadata.version("vector-quantize-pytorch")
DEVICES = ("cpu", "cuda")

WRAPPERS = [
    Float32Island(name="vector_quantize_pytorch.FSQ", devices=DEVICES,
                  build=lambda device: FSQ(levels=[8, 5, 5]).to(device),
                  inputs=lambda device: (tensor(2, 16, 3, device=device),), returns="input",
                  library="vector-quantize-pytorch", version=VERSION),
]
