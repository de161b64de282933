"""Chronos-2's rotary embedding: a float32 island of a time-series foundation model
(``pip install chronos-forecasting``).

What it claims, from chronos-forecasting 2.3.2:

- ``Chronos2RotaryEmbedding.forward(x, position_ids)`` (chronos/chronos2/layers.py:78-93):
  "Force float32 since bfloat16 loses precision on long contexts": the angles (the
  inverse frequencies times the positions), their cos and sin computed inside
  ``transformers.utils.generic.maybe_autocast(device_type, enabled=False)`` in float32,
  both returned in x's dtype. x only gives the device and the dtype; ``position_ids`` are
  integers. It names MPS (line 85), so MPS is among the devices it runs on. Built from a
  tiny ``Chronos2CoreConfig``, no weights downloaded.

Observed (docs/wrappers.md): it keeps its promise on cpu and on a fake cuda device; on a
fake MPS device it departs: it replaces ``mps`` by ``cpu`` before leaving autocast (line
85), so MPS's autocast stays on and the angles' product runs in the region's dtype, and
CPU's state is changed instead (xfail.txt, defects/mps_leaves_cpu_autocast.py).
"""

from __future__ import annotations

import importlib.metadata

import torch
from chronos.chronos2.config import Chronos2CoreConfig
from chronos.chronos2.layers import Chronos2RotaryEmbedding

from amp_conformance.checks.wrappers.declare import INPUT, Float32Island, tensor

VERSION = importlib.metadata.version("chronos-forecasting")


def rotary(device: str) -> Chronos2RotaryEmbedding:
    return Chronos2RotaryEmbedding(Chronos2CoreConfig(d_model=16, d_kv=8, num_heads=2)).to(device)


def inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x (batch, heads, positions, head size) and the positions (integers)."""
    return (tensor(2, 2, 6, 8, device=device),
            torch.arange(6, device=device).repeat(2, 1))


WRAPPERS = [
    Float32Island(
        name="chronos.Chronos2RotaryEmbedding",
        devices=("cpu", "cuda", "mps"),
        build=rotary,
        inputs=inputs,
        returns=(INPUT, INPUT),  # cos and sin, each in x's dtype (layers.py:93)
        library="chronos-forecasting",
        version=VERSION,
    ),
]
