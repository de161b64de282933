"""torchtnt's ``AutoUnit`` (``pip install torchtnt``): a training loop's unit that runs the
user's ``compute_loss`` inside an autocast region of its own, so its train and eval steps
are declared region runners: the model's forward is the checks' body.

What it claims, from torchtnt 0.2.4 (``torchtnt/framework/auto_unit.py``):

- ``AutoUnit(module, device=None, precision=None, ...)`` (lines 450-525): ``precision`` is
  ``"fp16"``, ``"bf16"`` or ``"fp32"`` (``torchtnt/utils/precision.py``:
  ``convert_precision_str_to_dtype``); the unit makes one region,
  ``torch.autocast(device_type=self.device.type, dtype=self.precision,
  enabled=self.precision is not None)`` (lines 178-183), and enters it around
  ``compute_loss`` in ``train_step`` (line 593) and ``eval_step`` (line 665), on the
  unit's device whatever it is.

So with ``precision="fp16"`` or ``"bf16"`` the model runs under that device's autocast in
that dtype, in both steps.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

import torch
from torchtnt.framework.auto_unit import AutoUnit
from torchtnt.framework.evaluate import evaluate
from torchtnt.framework.train import train

from amp_conformance.checks.wrappers.declare import RegionRunner

VERSION = importlib.metadata.version("torchtnt")
PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16}
DEVICES = ("cpu", "cuda")


class _Model(torch.nn.Module):
    """A model whose forward calls the checks' body."""

    def __init__(self, body: Callable[[], Any]):
        super().__init__()
        self.body, self.linear = body, torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.body()
        return self.linear(x)


class _Unit(AutoUnit):
    def compute_loss(self, state: Any, data: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = data
        out = self.module(x)
        return torch.nn.functional.mse_loss(out.float(), y), out

    def configure_optimizers_and_lr_scheduler(self, module: torch.nn.Module) -> Any:
        return torch.optim.SGD(module.parameters(), lr=0.1), None


def _data(device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 4, generator=g).to(device), torch.randn(3, 2, generator=g).to(device))]


def _unit(body: Callable[[], Any], precision: str, device: str) -> _Unit:
    return _Unit(module=_Model(body), device=torch.device(device), precision=precision)


def train_step(body: Callable[[], Any], precision: str, device: str) -> None:
    train(_unit(body, precision, device), _data(device), max_epochs=1)


def eval_step(body: Callable[[], Any], precision: str, device: str) -> None:
    evaluate(_unit(body, precision, device), _data(device))


WRAPPERS = [
    RegionRunner(name="torchtnt.AutoUnit.train_step", runs=train_step, devices=DEVICES,
                 precisions=PRECISIONS, library="torchtnt", version=VERSION),
    RegionRunner(name="torchtnt.AutoUnit.eval_step", runs=eval_step, devices=DEVICES,
                 precisions=PRECISIONS, library="torchtnt", version=VERSION),
]
