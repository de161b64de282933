"""fastai's ``MixedPrecision`` callback (``pip install fastai``): a ``Learner``'s training
loop runs the model inside an autocast region the callback enters itself, so one batch of
``Learner.fit`` is declared a region runner: the model's forward is the checks' body.

What it claims, from fastai 2.8.12 (``fastai/callback/fp16.py``):

- ``MixedPrecision(amp_mode='fp16')`` (lines 25-35): "Mixed precision training using
  Pytorch's Automatic Mixed Precision (AMP)", ``amp_mode`` "Supports fp16 and bf16"
  (``AMPMode``, lines 19-22); ``Learner.to_fp16()`` and ``to_bf16()`` add it. Nothing limits
  it to CUDA: a ``Learner`` trains on its ``DataLoaders``' device, the CPU included.
- ``before_fit`` (lines 37-48) makes ``autocast('cuda', dtype=dtype)`` whatever the device;
  ``before_batch`` enters it (line 50) and ``after_loss`` leaves it (line 53), with no
  ``finally``: the Learner calls ``after_loss`` only when the forward and the loss returned
  (fastai/learner.py:224-231).

So with ``amp_mode="fp16"`` or ``"bf16"`` the model's forward runs under its device's
autocast in that dtype, and the state is back after the step, returned or raised.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable
from typing import Any

import torch
from fastai.callback.fp16 import MixedPrecision
from fastai.data.core import DataLoaders
from fastai.learner import Learner
from torch.utils.data import TensorDataset

from amp_conformance.checks.wrappers.declare import RegionRunner

VERSION = importlib.metadata.version("fastai")
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16}  # AMPMode, fp16.py:19-22
DEVICES = ("cpu", "cuda")


class _Model(torch.nn.Module):
    """A model whose forward calls the checks' body."""

    def __init__(self, body: Callable[[], Any]):
        super().__init__()
        self.body, self.linear = body, torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.body()
        return self.linear(x)


def one_batch(body: Callable[[], Any], precision: str, device: str) -> None:
    """``Learner.fit(1)`` over one batch, with ``MixedPrecision(amp_mode=precision)``."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g))
    dls = DataLoaders.from_dsets(data, data, bs=3, device=torch.device(device), num_workers=0)
    learn = Learner(dls, _Model(body).to(device), loss_func=torch.nn.MSELoss(),
                    cbs=MixedPrecision(amp_mode=precision))
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available ... Disabling autocast"
        learn.fit(1)


WRAPPERS = [
    RegionRunner(name="fastai.MixedPrecision", runs=one_batch, devices=DEVICES,
                 precisions=PRECISIONS, library="fastai", version=VERSION),
]
