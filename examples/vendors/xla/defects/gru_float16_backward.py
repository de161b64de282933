"""A GRU module under float16 autocast on PyTorch/XLA: the forward runs, the backward
(outside the region) builds a graph XLA's HLO verifier refuses ("Seen floating point types of
different precisions in %multiply ... but mixed precision is disallowed"). torch_xla replaces
nn.GRU with its own (torch_xla/experimental/gru.py), whose backward mixes the float16 gates
with float32 values. bfloat16 runs.

    PJRT_DEVICE=CPU python gru_float16_backward.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

failed = False
for dtype in (torch.bfloat16, torch.float16):
    device = torch_xla.device()
    torch.manual_seed(0)
    module = torch.nn.GRU(4, 3).to(device)
    x = torch.randn(5, 2, 4).to(device).requires_grad_()
    with torch.autocast("xla", dtype=dtype):
        out, h = module(x)
    try:
        (out.float().sum() + h.float().sum()).backward()
        print(f"{dtype}: grad of x sums to {x.grad.sum().item():.4f}")
    except RuntimeError as exc:
        failed = True
        print(f"{dtype}: RuntimeError: {str(exc).splitlines()[0][:150]}")
sys.exit(1 if failed else 0)
