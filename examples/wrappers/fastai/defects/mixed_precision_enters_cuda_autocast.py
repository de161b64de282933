"""fastai's MixedPrecision callback (fastai/callback/fp16.py:48) makes
``autocast('cuda', dtype=dtype)`` whatever the Learner's device: on device="cpu" torch warns
that CUDA is not available and disables it, so the model trains with CPU autocast off, in
float32, and CUDA's autocast state is switched for the batch instead.

Run as pasted in a virtualenv with torch and fastai: prints what the model saw and exits 1
while fastai departs.
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


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.seen = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        out = self.linear(x)
        self.out = out.dtype
        return out


data = TensorDataset(torch.randn(3, 4), torch.randn(3, 2))
departs = False
for mode in ("fp16", "bf16"):
    model = Model()
    dls = DataLoaders.from_dsets(data, data, bs=3, device=torch.device("cpu"), num_workers=0)
    learn = Learner(dls, model, loss_func=torch.nn.MSELoss(), cbs=MixedPrecision(amp_mode=mode))
    with learn.no_bar(), learn.no_logging(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learn.fit(1)
    print(f"MixedPrecision(amp_mode={mode!r}) on cpu: the model saw CPU autocast "
          f"enabled={model.seen[0]}, its linear gave {model.out}")
    for w in {str(w.message) for w in caught if "autocast" in str(w.message).lower()}:
        print("  warning:", w)
    departs |= not model.seen[0]
if departs:
    print("DEPARTS: MixedPrecision on a cpu Learner enters CUDA's autocast, not CPU's")
    sys.exit(1)
