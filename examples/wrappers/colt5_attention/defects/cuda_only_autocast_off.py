"""CoLT5-attention's ``coor_descent`` and ``topk`` are decorated with
``@autocast('cuda', enabled = False)`` (colt5_attention/coor_descent.py:16, topk.py:9),
whatever the tensors' device: on CPU they turn CUDA's autocast off and leave CPU's on while
they route. The decorator's object is made at import, with the CUDA dtype of that moment
(float16), and entering it sets CUDA's dtype back to it: a program that set CUDA's autocast
to bfloat16 finds float16 inside. (The routing computes in the scores' dtype on CPU all the
same: none of its ops is in CPU autocast's lists.)

Run as pasted in a virtualenv with torch and colt5-attention: prints the two devices'
states inside coor_descent and exits 1 while it departs.
"""

import importlib.metadata
import sys

import torch
from colt5_attention.coor_descent import coor_descent
from torch.overrides import TorchFunctionMode

print("colt5-attention", importlib.metadata.version("colt5-attention"), "torch", torch.__version__)


class States(TorchFunctionMode):
    """Each device's autocast state at every torch call inside."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append({d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
                          for d in ("cpu", "cuda")})
        return func(*args, **(kwargs or {}))


set_to = (True, torch.bfloat16)  # CUDA's autocast as another part of a program leaves it
previous = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
torch.set_autocast_enabled("cuda", set_to[0])
torch.set_autocast_dtype("cuda", set_to[1])
try:
    scores = torch.randn(2, 16, generator=torch.Generator().manual_seed(0)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16), States() as inside:
        routed = coor_descent(scores, n_iters=20, k=4)
finally:
    torch.set_autocast_enabled("cuda", previous[0])
    torch.set_autocast_dtype("cuda", previous[1])
states = inside.seen[-1]
print("routed", routed.dtype, "| inside coor_descent: cpu autocast", states["cpu"],
      "| cuda autocast", states["cuda"], "set to", set_to)
if states["cpu"][0] or states["cuda"] != set_to:
    print("DEPARTS: coor_descent turns CUDA's autocast off (and its dtype to float16) for CPU "
          "tensors and leaves CPU's on")
    sys.exit(1)
