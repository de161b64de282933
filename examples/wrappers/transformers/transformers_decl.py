"""transformers' autocast helper and a layer it keeps in float32 (``pip install transformers``).

What they claim, from transformers 5.24.0:

- ``transformers.utils.generic.maybe_autocast(device_type, dtype=None, enabled=True,
  cache_enabled=None)`` (utils/generic.py:228-254): a context manager that "only autocasts
  if autocast is already enabled in this context, or this call has ``enabled=True``": it is
  ``torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...)`` then, a
  ``nullcontext`` otherwise. Declared twice:

  - as a region factory, ``maybe_autocast(device, dtype=<precision>)`` for ``bfloat16`` and
    ``float16`` (the dtype is named by its torch attribute: a name that is none raises
    before ``maybe_autocast`` is called). ``float32`` is claimed a no-op on CPU alone, where
    it was observed: torch.autocast refuses a dtype CPU autocast does not support, warns
    and turns autocast off (torch/amp/autocast_mode.py, the ``elif`` after the CUDA case).
    On CUDA that check is not made (the same file: the CUDA case asks only whether CUDA is
    available and whether it supports bfloat16), so a GPU would keep autocast on in
    float32, as the fake cuda device does, running torch's code; not yet observed on a
    GPU, so nothing is claimed there (``float32_unclaimed``: the item is skipped with why);
    a GPU session observes it with ``observe.py transformers_decl --device cuda``;
  - as a float32 island, ``maybe_autocast(device, enabled=False)``: the models' "Force
    float32" blocks (e.g. models/ernie4_5_moe/modeling_ernie4_5_moe.py:348, gpt2's
    ``_upcast_and_reordered_attn``, modeling_gpt2.py:114) enter it around float32 work.

- ``Ernie4_5_MoeTopKRouter`` (models/ernie4_5_moe/modeling_ernie4_5_moe.py:336-360): the
  router computes its logits and routing weights in float32 inside
  ``maybe_autocast(enabled=False)`` ("# Force float32", line 348) and returns the logits in
  float32, the routing weights cast back to the hidden states' dtype (line 358) and the
  selected experts (integers). Built from its config, tiny, no weights downloaded.
"""

from __future__ import annotations

import importlib.metadata

import torch
from transformers import Ernie4_5_MoeConfig
from transformers.models.ernie4_5_moe.modeling_ernie4_5_moe import Ernie4_5_MoeTopKRouter
from transformers.utils.generic import maybe_autocast

from amp_conformance.checks.wrappers.declare import (
    ERROR,
    FLOAT32,
    INPUT,
    NOOP,
    Float32Island,
    RegionFactory,
    tensor,
)

VERSION = importlib.metadata.version("transformers")
DEVICES = ("cpu", "cuda")
CUDA_FLOAT32 = ("torch.autocast('cuda', dtype=torch.float32) has no dtype check in "
                "torch/amp/autocast_mode.py (on a fake cuda device autocast stays on in float32)"
                "; what a GPU does is not yet observed")


def region(precision: str, device_type: str):
    """``maybe_autocast(device, dtype=torch.<precision>)``."""
    return maybe_autocast(device_type, dtype=getattr(torch, precision))


def router(device: str) -> Ernie4_5_MoeTopKRouter:
    config = Ernie4_5_MoeConfig(hidden_size=8, num_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=8, intermediate_size=16,
                                num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, vocab_size=32)
    return Ernie4_5_MoeTopKRouter(config).to(device)


WRAPPERS = [
    RegionFactory(
        name="transformers.maybe_autocast",
        make=region,
        devices=DEVICES,
        precisions={"bfloat16": torch.bfloat16, "float16": torch.float16},
        float32_names=("float32",),  # on CPU torch.autocast refuses float32: autocast off
        float32=NOOP,
        float32_unclaimed={"cuda": CUDA_FLOAT32},
        unknown=ERROR,  # no torch dtype of that name
        decorator=True,  # torch.autocast is a decorator too
        library="transformers",
        version=VERSION,
    ),
    Float32Island(
        name="transformers.maybe_autocast-disabled",
        devices=DEVICES,
        context=lambda device: maybe_autocast(device, enabled=False),
        library="transformers",
        version=VERSION,
    ),
    Float32Island(
        name="transformers.Ernie4_5_MoeTopKRouter",
        devices=DEVICES,
        build=router,
        inputs=lambda device: (tensor(3, 8, device=device),),
        returns=(FLOAT32, INPUT),  # logits in float32, routing weights in the input's dtype
        library="transformers",
        version=VERSION,
    ),
]
