"""MONAI's float32 islands leave autocast for CUDA only, whatever the tensors' device:
``CastToFloat.forward`` (networks/utils.py:1294) and ``EMAQuantizer.quantize``
(networks/layers/vector_quantizer.py:103) compute inside ``torch.autocast("cuda",
enabled=False)``. On CPU that turns CUDA's autocast off and leaves CPU's on: the
quantizer's codebook distances (``torch.mm``) run in bfloat16 inside a CPU bfloat16 region.
(CastToFloat around a LayerNorm still gives float32 on CPU: CPU autocast runs layer_norm in
float32 anyway.)

Run as pasted in a virtualenv with torch and monai: prints the two devices' flags inside
each block and the dtype the quantizer's matrix product ran in, and exits 1 while MONAI
departs.
"""

import sys

import monai
import torch
from monai.networks.layers.vector_quantizer import EMAQuantizer
from monai.networks.utils import CastToFloat
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

print("monai", monai.__version__, "torch", torch.__version__)


class Flags(TorchFunctionMode):
    """Each device's autocast flag at every torch call inside."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append({d: torch.is_autocast_enabled(d) for d in ("cpu", "cuda")})
        return func(*args, **(kwargs or {}))


class MatmulDtypes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.mm.default:
            self.dtypes.append(out.dtype)
        return out


torch.manual_seed(0)
norm = CastToFloat(torch.nn.LayerNorm(8))
quantizer = EMAQuantizer(spatial_dims=2, num_embeddings=16, embedding_dim=8)
previous = torch.is_autocast_enabled("cuda")
torch.set_autocast_enabled("cuda", True)  # CUDA's flag on, as another part of a program may leave it
try:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with Flags() as in_norm:
            norm(torch.randn(4, 8))
        with Flags() as in_quantizer, MatmulDtypes() as mm:
            quantizer.quantize(torch.randn(2, 8, 4, 4))
finally:
    torch.set_autocast_enabled("cuda", previous)
departs = False
for name, flags in (("CastToFloat", in_norm.seen[-1]), ("EMAQuantizer.quantize",
                                                         in_quantizer.seen[-1])):
    print(f"{name}: inside its autocast-off block: cpu autocast {flags['cpu']} | cuda autocast "
          f"{flags['cuda']}")
    departs = departs or flags["cpu"] or not flags["cuda"]
print("EMAQuantizer.quantize: its codebook torch.mm ran in", mm.dtypes)
if departs or any(d != torch.float32 for d in mm.dtypes):
    print("DEPARTS: the blocks turn CUDA's autocast off for CPU tensors and leave CPU's on")
    sys.exit(1)
