"""Chronos-2's rotary embedding leaves CPU's autocast on MPS, not MPS's:
``Chronos2RotaryEmbedding.forward`` (chronos/chronos2/layers.py:84-87) replaces the device
type ``mps`` by ``cpu`` before ``maybe_autocast(device_type, enabled=False)``, so inside an
MPS region MPS's autocast stays on and the angles' matrix product (``inv_freq @
position_ids``, layers.py:88) runs in the region's lower precision, where the comment above
it says "Force float32".

The same in plain torch: ``torch.autocast("cpu", enabled=False)`` inside an MPS region
leaves MPS's on, and MPS's autocast runs ``matmul`` in lower precision. No Mac is needed to
see it: MPS's autocast kernels ship with every torch build, and torch's FakeTensorMode makes
MPS tensors without the device (the region is switched on with torch.set_autocast_*, as
torch.autocast would; torch.autocast("mps") itself asks for the hardware); Chronos-2's
module runs on the suite's fake MPS device.

Run as pasted in a virtualenv with torch, chronos-forecasting and this suite: prints the
dtype the product ran in, plain and in Chronos-2, and exits 1 while Chronos departs.
"""

import importlib.metadata
import sys

import torch
from chronos.chronos2.config import Chronos2CoreConfig
from chronos.chronos2.layers import Chronos2RotaryEmbedding
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

print("chronos-forecasting", importlib.metadata.version("chronos-forecasting"),
      "torch", torch.__version__)


class Products(TorchDispatchMode):
    """The dtype of every matrix product run inside."""

    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.bmm.default, torch.ops.aten.mm.default):
            self.dtypes.append(out.dtype)
        return out


def switched_on(dtype):
    """An MPS autocast region, switched on as torch.autocast would (it asks for a Mac)."""
    torch.set_autocast_enabled("mps", True)
    torch.set_autocast_dtype("mps", dtype)


previous = torch.is_autocast_enabled("mps"), torch.get_autocast_dtype("mps")
try:
    # plain torch: leaving CPU's autocast inside an MPS region leaves MPS's on
    with FakeTensorMode():
        switched_on(torch.bfloat16)
        a, b = torch.ones(2, 4, 1, device="mps"), torch.ones(2, 1, 6, device="mps")
        with torch.autocast("cpu", enabled=False), Products() as plain:
            a @ b
    # Chronos-2: its "Force float32" block, on a fake MPS device (the suite's, which lets
    # a module's indexing and .to() run without the device)
    from amp_conformance.checks.wrappers.fake_device import on_device
    from amp_conformance.core.target import Target

    with on_device(Target("mps", fake=True)):
        rope = Chronos2RotaryEmbedding(Chronos2CoreConfig(d_model=16, d_kv=8,
                                                          num_heads=2)).to("mps")
        x = torch.empty(2, 2, 6, 8, device="mps", dtype=torch.bfloat16)
        positions = torch.arange(6, device="mps").repeat(2, 1)
        switched_on(torch.bfloat16)
        with Products() as inside:
            rope(x, positions)
finally:
    torch.set_autocast_enabled("mps", previous[0])
    torch.set_autocast_dtype("mps", previous[1])
print("plain torch, autocast('cpu', enabled=False) in an MPS bfloat16 region, a @ b:",
      plain.dtypes)
print("Chronos2RotaryEmbedding in an MPS bfloat16 region, its angles' product:", inside.dtypes)
sys.exit(1 if torch.bfloat16 in inside.dtypes else 0)
