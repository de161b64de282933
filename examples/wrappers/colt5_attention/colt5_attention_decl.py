"""CoLT5-attention's routing (``pip install colt5-attention``): conditionally routed
attention's differentiable top-k, a linear-attention library's autocast wrappers.

What it claims, from colt5-attention 0.11.2:

- ``coor_descent(s, *, n_iters, k, eps=0.1, ...)`` (colt5_attention/coor_descent.py:16-70),
  the coordinate descent that scores which tokens are routed, is decorated with
  ``@autocast('cuda', enabled = False)`` (:16, ``from torch.amp import autocast``, :3) and
  casts nothing: it leaves autocast and computes in the dtype of the scores it is given,
  returning them in it. An island whose core is its input's dtype.
- ``topk(x, k, ...)`` (colt5_attention/topk.py:9-60), decorated the same way, runs it and
  returns the top-k values, their indices, the scores and the straight-through gates, the
  floating ones in x's dtype.
- The fused kernels' autograd Function ``_coor_descent`` (colt5_attention/
  triton_coor_descent.py:313-483) decorates its forward with ``custom_fwd`` and its
  backward with ``custom_bwd``, both ``device_type = 'cuda'`` without ``cast_inputs``
  (:6-8): a forward decorator that casts nothing on CUDA, its backward in the forward's
  autocast state. Importing the module needs triton.

The decorators name CUDA whatever the tensors' device (docs/wrappers.md).
"""

from __future__ import annotations

import functools
import importlib.metadata

import torch
from colt5_attention import triton_coor_descent
from colt5_attention.coor_descent import coor_descent
from colt5_attention.topk import topk

from amp_conformance.checks.wrappers.declare import (
    INPUT,
    Float32Island,
    ForwardDecorator,
    tensor,
)

VERSION = importlib.metadata.version("colt5-attention")
DEVICES = ("cpu", "cuda")


def scores(device: str) -> tuple[torch.Tensor]:
    """Routing scores: 2 sequences of 2 heads, 16 tokens each."""
    return (tensor(2, 2, 16, device=device),)


WRAPPERS = [
    Float32Island(name="colt5_attention.coor_descent", devices=DEVICES,
                  build=lambda device: functools.partial(coor_descent, n_iters=20, k=4),
                  inputs=scores, core=INPUT, returns=INPUT,
                  library="colt5-attention", version=VERSION),
    Float32Island(name="colt5_attention.topk", devices=DEVICES,
                  build=lambda device: functools.partial(topk, k=4),
                  inputs=scores, core=INPUT, returns=(INPUT, INPUT, INPUT),
                  library="colt5-attention", version=VERSION),
    ForwardDecorator(name="colt5_attention.triton_coor_descent.custom_fwd",
                     decorate=triton_coor_descent.custom_fwd, devices=("cuda",),
                     disables_autocast=False,
                     decorate_backward=triton_coor_descent.custom_bwd,
                     library="colt5-attention", version=VERSION),
]
