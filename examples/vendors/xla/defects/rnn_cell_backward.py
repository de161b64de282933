"""Gradients of torch.rnn_relu_cell (and rnn_tanh_cell) on PyTorch/XLA: after one gradient is
read, reading the next raises "Executable expected parameter 3 of size 32 but got buffer
with incompatible size 256". No autocast is involved: float32 throughout.

    PJRT_DEVICE=CPU python rnn_cell_backward.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

g = torch.Generator().manual_seed(1)
device = torch_xla.device()
x, h, w_ih, w_hh = (torch.randn(8, 8, generator=g).to(device).requires_grad_() for _ in range(4))
b_ih, b_hh = (torch.randn(8, generator=g).to(device).requires_grad_() for _ in range(2))
torch.rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh).sum().backward()
try:
    print("grad of x:", x.grad.sum().item())
    print("grad of h:", h.grad.sum().item())
except RuntimeError as exc:
    print("RuntimeError:", str(exc).splitlines()[0])
    sys.exit(1)
