"""Coqui's Trainer runs precision="fp16" in bfloat16 on the CPU: its configuration says
"`fp16` for float16 and `bf16` for bfloat16" (trainer/trainer.py:166-170), but
``_get_autocast_args`` (lines 1118-1134) takes the precision into account on CUDA alone; on
the CPU any mixed precision is ``torch.bfloat16`` (line 1133), so a model configured for
float16 trains in bfloat16 there, silently.

Run as pasted in a virtualenv with torch and trainer (TRAINER_TELEMETRY=0 keeps it off the
network): prints the autocast dtype the model's forward sees for each precision, and exits
1 while fp16 gives bfloat16.
"""

import contextlib
import importlib.metadata
import io
import os
import sys
import tempfile
from dataclasses import dataclass

os.environ.setdefault("TRAINER_TELEMETRY", "0")

import torch  # noqa: E402
from trainer import Trainer, TrainerArgs, TrainerConfig, TrainerModel  # noqa: E402

print("trainer", importlib.metadata.version("trainer"), "torch", torch.__version__)
seen = {}


class Model(TrainerModel):
    def __init__(self, precision):
        super().__init__()
        self.layer, self.precision = torch.nn.Linear(4, 2), precision

    def forward(self, x):
        seen[self.precision] = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        return self.layer(x)

    def train_step(self, batch, criterion):
        out = self.forward(batch[0])
        return {"out": out}, {"loss": criterion(out.float(), batch[1])}

    def eval_step(self, batch, criterion):
        return self.train_step(batch, criterion)

    def get_criterion(self):
        return torch.nn.MSELoss()

    def get_data_loader(self, config, assets, is_eval, samples, verbose, num_gpus, rank=0):
        return torch.utils.data.DataLoader([(torch.ones(3, 4), torch.zeros(3, 2))],
                                           batch_size=None)


@dataclass
class Config(TrainerConfig):
    pass


for precision in ("fp16", "bf16"):
    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        config = Config(epochs=1, mixed_precision=True, precision=precision, output_path=out,
                        run_eval=False, save_checkpoints=False, lr=0.1, optimizer="SGD",
                        optimizer_params={})
        Trainer(TrainerArgs(), config, out, model=Model(precision), train_samples=[0],
                parse_command_line_args=False).fit()
    print(f"precision={precision!r}: the model's forward ran with CPU autocast "
          f"(enabled, dtype) = {seen[precision]}")
sys.exit(1 if seen["fp16"][1] == torch.bfloat16 else 0)
