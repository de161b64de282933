"""torch.roll of an empty tensor on PyTorch/XLA kills the process with SIGFPE (an integer
division by zero: the shift taken modulo a dimension of size 0). PyTorch's CPU kernel
returns the empty tensor. Found by the OpInfo tier (--amp-opinfo): roll's samples include
empty tensors. The reproduction runs the XLA call in a child process, which dies.

    PJRT_DEVICE=CPU python roll_empty_sigfpe.py    # exit 1 while XLA departs
"""
import signal
import subprocess
import sys

import torch

print("cpu:", tuple(torch.roll(torch.empty(0), 1).shape))
child = subprocess.run([sys.executable, "-c", "import torch, torch_xla; "
                        "print(tuple(torch.roll(torch.empty(0, device='xla'), 1).cpu().shape))"],
                       capture_output=True, text=True)
how = (f"killed by {signal.Signals(-child.returncode).name}" if child.returncode < 0
       else f"exit status {child.returncode}: {child.stdout.strip()}")
print("xla:", how)
sys.exit(0 if child.returncode == 0 else 1)
