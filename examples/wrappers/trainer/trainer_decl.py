"""Coqui's 👟 Trainer, the training loop of Coqui TTS (``pip install trainer``).

What it claims, from trainer 0.0.36:

- ``TrainerConfig.precision`` (trainer/trainer.py:166-170): "Precision to use in mixed
  precision training. `fp16` for float16 and `bf16` for bfloat16", with
  ``mixed_precision=True`` (line 165). Each training step computes the model's
  ``train_step`` inside ``torch.autocast(device_type, dtype, enabled=mixed_precision)``
  (``_compute_loss``, lines 1151-1158), the device and dtype from ``_get_autocast_args``
  (lines 1118-1134). Declared as a region runner: one epoch of ``Trainer.fit`` over one
  batch, the checks' body called where the model's forward runs.

The Trainer pings a telemetry address at the start of every run unless
``TRAINER_TELEMETRY=0`` (trainer/analytics.py:5-12); this module sets it (and
integration.toml), so no check reaches the network.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import os
import tempfile
from dataclasses import dataclass

os.environ.setdefault("TRAINER_TELEMETRY", "0")  # before trainer is imported (analytics.py:5)

import torch  # noqa: E402
from trainer import Trainer, TrainerArgs, TrainerConfig, TrainerModel  # noqa: E402

from amp_conformance.checks.wrappers.declare import RegionRunner  # noqa: E402

VERSION = importlib.metadata.version("trainer")


class Model(TrainerModel):
    """A model whose forward calls the checks' body first."""

    def __init__(self, body):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.body = body

    def forward(self, x):
        self.body()
        return self.layer(x)

    def train_step(self, batch, criterion):
        x, y = batch
        out = self.forward(x)
        return {"out": out}, {"loss": criterion(out.float(), y)}

    def eval_step(self, batch, criterion):
        return self.train_step(batch, criterion)

    def get_criterion(self):
        return torch.nn.MSELoss()

    def get_data_loader(self, config, assets, is_eval, samples, verbose, num_gpus, rank=0):
        return torch.utils.data.DataLoader([(torch.ones(3, 4), torch.zeros(3, 2))],
                                           batch_size=None)


@dataclass
class Config(TrainerConfig):
    """The Trainer's configuration: mixed precision on, one epoch, nothing saved."""


def one_epoch(body, precision, device):
    """``Trainer(..., model)._fit()`` for one epoch of one batch in ``precision`` (the
    Trainer picks its device itself: CUDA where it is available, else the CPU)."""
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        config = Config(epochs=1, mixed_precision=True, precision=precision, output_path=out,
                        run_eval=False, print_step=1000, save_step=1000, save_checkpoints=False,
                        lr=0.1, optimizer="SGD", optimizer_params={})
        Trainer(TrainerArgs(), config, out, model=Model(body), train_samples=[0],
                parse_command_line_args=False)._fit()


WRAPPERS = [
    RegionRunner(
        name="trainer.Trainer._fit",
        runs=one_epoch,
        devices=("cpu", "cuda"),
        precisions={"fp16": torch.float16, "bf16": torch.bfloat16},
        library="trainer",
        version=VERSION,
    ),
]
