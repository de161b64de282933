"""RNN modules on a PackedSequence with PyTorch/XLA, no autocast:

- an LSTM (or RNN_TANH) on xla runs its forward; its backward leaves gradients that cannot be
  read ("The tensor has a non-zero number of elements, but its data is not allocated yet").
  PyTorch's CPU LSTM runs it, in the same process.
- ``import torch_xla`` replaces ``torch.nn.GRU`` with its own scan-based GRU for every device
  (torch_xla/_patched_functions.py, torch_xla/experimental/gru.py), which refuses a
  PackedSequence outright ("PackedSequence is not supported. Use a regular tensor instead."),
  even on cpu.

    PJRT_DEVICE=CPU python rnn_packed_sequence.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla
from torch.nn.utils.rnn import pack_padded_sequence


def run(mode, device):
    torch.manual_seed(0)
    module = getattr(torch.nn, mode)(4, 3, batch_first=True).to(device)
    x = torch.randn(2, 5, 4).to(device).requires_grad_()
    packed = pack_padded_sequence(x, torch.tensor([5, 3]), batch_first=True)
    try:
        out, _ = module(packed)
        out.data.sum().backward()
        return f"grad of x sums to {x.grad.sum().item():.4f}"
    except (RuntimeError, AssertionError) as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"


lstm = {str(d): run("LSTM", d) for d in ("cpu", torch_xla.device())}
print("LSTM:", lstm)
print(f"torch.nn.GRU is {torch.nn.GRU.__module__}.GRU; on cpu: {run('GRU', 'cpu')}")
sys.exit(0 if lstm["cpu"] == lstm["xla:0"] and torch.nn.GRU.__module__ == "torch.nn.modules.rnn"
         else 1)
