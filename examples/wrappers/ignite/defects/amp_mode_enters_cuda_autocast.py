"""pytorch-ignite's create_supervised_trainer and create_supervised_evaluator with
amp_mode="amp" on device="cpu" (ignite/engine/__init__.py:217 and :751) enter
torch.amp.autocast("cuda", enabled=True) whatever the device: torch warns that CUDA is not
available and disables it, so the model runs with CPU autocast off, in float32, and CUDA's
autocast state is switched for the step instead.

Run as pasted in a virtualenv with torch and pytorch-ignite: prints what the model saw and
exits 1 while ignite departs.
"""

import sys
import warnings

import ignite
import torch
from ignite.engine import create_supervised_evaluator, create_supervised_trainer

print("pytorch-ignite", ignite.__version__, "torch", torch.__version__)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):
        self.seen = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        out = self.linear(x)
        self.out = out.dtype
        return out


data = [(torch.randn(3, 4), torch.randn(3, 2))]
departs = False
for kind in ("trainer", "evaluator"):
    model = Model()
    if kind == "trainer":
        engine = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                           torch.nn.MSELoss(), device="cpu", amp_mode="amp")
    else:
        engine = create_supervised_evaluator(model, device="cpu", amp_mode="amp")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.run(data, max_epochs=1)
    print(f"{kind}(device='cpu', amp_mode='amp'): the model saw CPU autocast "
          f"enabled={model.seen[0]}, its linear gave {model.out}")
    for w in caught:
        print("  warning:", w.message)
    departs |= not model.seen[0]
if departs:
    print("DEPARTS: amp_mode='amp' on device='cpu' enters CUDA's autocast, not CPU's")
    sys.exit(1)
