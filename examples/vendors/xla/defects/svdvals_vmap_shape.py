"""torch.linalg.svdvals under torch.func.vmap and bfloat16 autocast on PyTorch/XLA: the
batched result of two 4x3 bfloat16 matrices says its shape is [3] while its values are
[2, 3]; indexing it (the first sample's values) then leaves XLA's runtime unusable: every
later read raises "Executable expected parameter 0 of size 6 but got buffer with
incompatible size 12". The shape is [3] without autocast and in float32 too; on the CPU
(float32: it has no bfloat16 svd) it is [2, 3].

    PJRT_DEVICE=CPU python svdvals_vmap_shape.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

device = torch_xla.device()
g = torch.Generator().manual_seed(0)
x = torch.stack([torch.randn(4, 3, generator=g) for _ in range(2)])
print("cpu:", tuple(torch.func.vmap(torch.linalg.svdvals)(x).shape))
with torch.autocast("xla", dtype=torch.bfloat16):
    y = torch.func.vmap(torch.linalg.svdvals)(x.to(torch.bfloat16).to(device))
print("xla: shape", tuple(y.shape), "values", tuple(y.cpu().shape))
try:
    print("xla, first sample:", y[0].float().cpu())
    print("a later op:", (torch.ones(3, device=device) + 1).cpu())
except RuntimeError as exc:
    print("RuntimeError:", str(exc).splitlines()[0])
    sys.exit(1)
sys.exit(1 if tuple(y.shape) != (2, 3) else 0)
