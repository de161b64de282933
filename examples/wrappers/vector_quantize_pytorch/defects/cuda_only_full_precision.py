"""vector-quantize-pytorch's ``FSQ`` forces its quantization step to full precision inside
``autocast('cuda', enabled = False)`` (vector_quantize_pytorch/
finite_scalar_quantization.py:277), whatever the tensors' device: on CPU it turns CUDA's
autocast off and leaves CPU's on in that step. (The step's ops stay float32 on CPU all the
same: its input is cast to float32 at :282 and it holds no op CPU autocast casts, unless
``orthogonal_rotation`` adds a matrix product.)

Run as pasted in a virtualenv with torch and vector-quantize-pytorch: prints the two
devices' flags inside the step and exits 1 while it departs.
"""

import importlib.metadata
import sys

import torch
from torch.overrides import TorchFunctionMode
from vector_quantize_pytorch import FSQ

print("vector-quantize-pytorch", importlib.metadata.version("vector-quantize-pytorch"),
      "torch", torch.__version__)


class Flags(TorchFunctionMode):
    """Each device's autocast flag at every torch call inside."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append({d: torch.is_autocast_enabled(d) for d in ("cpu", "cuda")})
        return func(*args, **(kwargs or {}))


fsq = FSQ(levels=[8, 5, 5])
previous = torch.is_autocast_enabled("cuda")
torch.set_autocast_enabled("cuda", True)  # CUDA's flag on, as another part of a program may leave it
try:
    with torch.autocast("cpu", dtype=torch.bfloat16), Flags() as inside:
        codes, indices = fsq(torch.randn(2, 16, 3))
finally:
    torch.set_autocast_enabled("cuda", previous)
in_step = [f for f in inside.seen if not f["cuda"]]  # the calls inside its autocast block
flags = in_step[-1] if in_step else inside.seen[-1]
print("codes", codes.dtype, "| inside its full-precision step: cpu autocast", flags["cpu"],
      "| cuda autocast", flags["cuda"])
if flags["cpu"] or not flags["cuda"]:
    print("DEPARTS: the step turns CUDA's autocast off for CPU tensors and leaves CPU's on")
    sys.exit(1)
