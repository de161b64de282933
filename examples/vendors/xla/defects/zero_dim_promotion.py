"""torch.atan2, torch.addcmul, torch.addcdiv and torch.maximum of a bfloat16 (or float16)
tensor with a zero-dimensional float32 tensor give float32 on PyTorch/XLA; PyTorch's type
promotion gives the tensor's dtype (a zero-dimensional tensor does not promote a
dimensioned one of the same category), as XLA itself does for add and mul. Outside
autocast; XLA has no autocast kernel for these ops, so inside autocast too.

    PJRT_DEVICE=CPU python zero_dim_promotion.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

CALLS = {"atan2": lambda a, s: torch.atan2(a, s), "addcmul": lambda a, s: torch.addcmul(a, a, s),
         "addcdiv": lambda a, s: torch.addcdiv(a, a, s), "maximum": torch.maximum,
         "add": torch.add, "mul": torch.mul}
dtypes = {}
for device in ("cpu", torch_xla.device()):
    for amp in (torch.bfloat16, torch.float16):
        a = (torch.rand(8, generator=torch.Generator().manual_seed(0)) + 0.1).to(device, amp)
        s = torch.tensor(0.5).to(device)  # float32, zero-dimensional
        got = {name: str(call(a, s).dtype).removeprefix("torch.") for name, call in CALLS.items()}
        dtypes[(str(device).split(":")[0], amp)] = got
        print(f"{device}, {str(amp).removeprefix('torch.')}[8] with float32[]: {got}")
departs = [(str(amp).removeprefix("torch."), name) for amp in (torch.bfloat16, torch.float16)
           for name in CALLS if dtypes[("cpu", amp)][name] != dtypes[("xla", amp)][name]]
print("departs:", departs or "none")
sys.exit(1 if departs else 0)
