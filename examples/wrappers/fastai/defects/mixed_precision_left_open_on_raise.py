"""fastai's MixedPrecision callback enters its region in ``before_batch`` and leaves it in
``after_loss`` (fastai/callback/fp16.py:50, 53), with no ``finally``: the Learner calls
``after_loss`` only when the forward and the loss returned (fastai/learner.py:224-231), so
when the model's forward raises, the region stays entered after ``fit`` has raised. The
region is CUDA's whatever the device (fp16.py:48): on a CPU machine its dtype and nesting
leak into CUDA's state; on a GPU autocast itself stays on.

Run as pasted in a virtualenv with torch and fastai: prints the state before and after a
fit whose forward raises, and exits 1 while fastai departs.
"""

import sys
import warnings

import fastai
import torch
from fastai.callback.fp16 import MixedPrecision
from fastai.data.core import DataLoaders
from fastai.learner import Learner
from torch.utils.data import TensorDataset

print("fastai", fastai.__version__, "torch", torch.__version__)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        raise RuntimeError("raised by the model's forward")


def state():
    return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")


data = TensorDataset(torch.randn(3, 4), torch.randn(3, 2))
dls = DataLoaders.from_dsets(data, data, bs=3, device=torch.device(DEVICE), num_workers=0)
learn = Learner(dls, Raises().to(DEVICE), loss_func=torch.nn.MSELoss(),
                cbs=MixedPrecision(amp_mode="fp16"))
torch.set_autocast_dtype("cuda", torch.bfloat16)  # so a leaked dtype shows
before = state()
with learn.no_bar(), learn.no_logging(), warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        learn.fit(1)
    except RuntimeError as exc:
        print("fit raised:", exc)
after = state()
print(f"on {DEVICE}: CUDA's autocast (enabled, dtype) before fit {before}, after it raised {after}")
if after != before:
    print("DEPARTS: the region MixedPrecision entered stays entered when the forward raises")
    sys.exit(1)
