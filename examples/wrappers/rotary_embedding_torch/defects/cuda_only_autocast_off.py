"""rotary-embedding-torch's ``RotaryEmbedding.forward`` is decorated with
``@autocast('cuda', enabled = False)`` (rotary_embedding_torch/rotary_embedding_torch.py:319;
``apply_rotary_emb`` too, :41), whatever the tensors' device: on CPU it turns CUDA's
autocast off and leaves CPU's on while it computes the frequencies. (Their dtype is float32
on CPU all the same: the outer product ``einsum('..., f -> ... f')`` at :343 becomes a
multiplication, which CPU autocast does not cast.)

Run as pasted in a virtualenv with torch and rotary-embedding-torch: prints the two
devices' flags inside forward and exits 1 while it departs.
"""

import importlib.metadata
import sys

import torch
from rotary_embedding_torch import RotaryEmbedding
from torch.overrides import TorchFunctionMode

print("rotary-embedding-torch", importlib.metadata.version("rotary-embedding-torch"),
      "torch", torch.__version__)


class Flags(TorchFunctionMode):
    """Each device's autocast flag at every torch call inside."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append({d: torch.is_autocast_enabled(d) for d in ("cpu", "cuda")})
        return func(*args, **(kwargs or {}))


rotary = RotaryEmbedding(dim=8)
previous = torch.is_autocast_enabled("cuda")
torch.set_autocast_enabled("cuda", True)  # CUDA's flag on, as another part of a program may leave it
try:
    with torch.autocast("cpu", dtype=torch.bfloat16), Flags() as inside:
        freqs = rotary(torch.arange(16).float())
finally:
    torch.set_autocast_enabled("cuda", previous)
flags = inside.seen[-1]
print("frequencies", freqs.dtype, "| inside forward: cpu autocast", flags["cpu"],
      "| cuda autocast", flags["cuda"])
if flags["cpu"] or not flags["cuda"]:
    print("DEPARTS: forward turns CUDA's autocast off for CPU tensors and leaves CPU's on")
    sys.exit(1)
