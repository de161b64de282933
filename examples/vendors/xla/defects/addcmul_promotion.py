"""torch.addcmul of float16 and bfloat16 tensors on PyTorch/XLA gives float16; PyTorch's
type promotion gives float32 (torch.promote_types(torch.float16, torch.bfloat16)), as XLA
itself does for add and mul. Outside autocast; XLA has no addcmul autocast kernel.

    PJRT_DEVICE=CPU python addcmul_promotion.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

dtypes = {}
for device in ("cpu", torch_xla.device()):
    a = torch.ones(8, dtype=torch.float16, device=device)
    b = torch.ones(8, dtype=torch.bfloat16, device=device)
    dtypes[str(device)] = (torch.addcmul(a, b, a).dtype, (a + b).dtype, (a * b).dtype)
    print(f"{device}: addcmul {dtypes[str(device)][0]}, add {dtypes[str(device)][1]}, "
          f"mul {dtypes[str(device)][2]}")
sys.exit(0 if dtypes["cpu"] == dtypes["xla:0"] else 1)
