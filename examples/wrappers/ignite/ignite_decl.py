"""pytorch-ignite's ``amp_mode`` (``pip install pytorch-ignite``): its supervised trainer's
and evaluator's step runs the model inside an autocast region it enters itself, so each
is declared a region runner: the model's forward is the checks' body.

What they claim, from pytorch-ignite 0.5.5 (``ignite/engine/__init__.py``):

- ``create_supervised_trainer(model, optimizer, loss_fn, device=None, ..., amp_mode=None)``
  (lines 440-540): ``device`` "can be CPU, GPU or TPU" (line 463); ``amp_mode``: "can be
  ``amp`` or ``apex``, model and optimizer will be casted to float16 using torch.cuda.amp
  for ``amp``" (line 475). ``_check_arg`` (lines 409-437) refuses ``amp_mode`` with an MPS
  or XLA device and accepts it with a CPU one.
- ``create_supervised_evaluator(model, ..., device=None, ..., amp_mode=None)`` (lines
  759-840): ``amp_mode``: "can be ``amp``, model will be casted to float16" (line 787).

So with ``amp_mode="amp"`` on a device the factories accept, the model runs under that
device's float16 autocast. Both steps enter ``torch.amp.autocast("cuda", enabled=True)``
whatever the device (lines 217 and 751): on CPU torch warns and disables it, and the model
runs in float32 with CPU autocast off (``defects/amp_mode_enters_cuda_autocast.py``). That
region is given no dtype, so it takes the one already set when the step enters it (float16
by default; inside a caller's bfloat16 region, bfloat16): ``ambient_dtype=("amp",)``.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from collections.abc import Callable
from typing import Any

import torch
from ignite.engine import create_supervised_evaluator, create_supervised_trainer

from amp_conformance.checks.wrappers.declare import RegionRunner

VERSION = importlib.metadata.version("pytorch-ignite")
PRECISIONS = {"amp": torch.float16}  # lines 475 and 787
DEVICES = ("cpu", "cuda")


class _Model(torch.nn.Module):
    """A model whose forward calls the checks' body."""

    def __init__(self, body: Callable[[], Any]):
        super().__init__()
        self.body, self.linear = body, torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.body()
        return self.linear(x)


def _batch(device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g))]


def _run(engine: Any, device: str) -> None:
    with warnings.catch_warnings():  # "CUDA is not available ... Disabling autocast" on CPU
        warnings.simplefilter("ignore")
        engine.run(_batch(device), max_epochs=1)


def trainer_step(body: Callable[[], Any], precision: str, device: str) -> None:
    model = _Model(body).to(device)
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                        torch.nn.MSELoss(), device=device, amp_mode=precision)
    _run(trainer, device)


def evaluator_step(body: Callable[[], Any], precision: str, device: str) -> None:
    evaluator = create_supervised_evaluator(_Model(body).to(device), device=device,
                                            amp_mode=precision)
    _run(evaluator, device)


WRAPPERS = [
    RegionRunner(name="ignite.create_supervised_trainer", runs=trainer_step, devices=DEVICES,
                 precisions=PRECISIONS, ambient_dtype=("amp",), library="pytorch-ignite",
                 version=VERSION),
    RegionRunner(name="ignite.create_supervised_evaluator", runs=evaluator_step,
                 devices=DEVICES, precisions=PRECISIONS, ambient_dtype=("amp",),
                 library="pytorch-ignite", version=VERSION),
]
