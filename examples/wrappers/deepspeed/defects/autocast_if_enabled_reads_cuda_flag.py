"""deepspeed 0.19.8: with the engine's torch_autocast section off, a user's CPU autocast region
stays on inside the engine's forward unless CUDA's autocast flag happens to be set.

deepspeed/runtime/torch_autocast.py:119-129 (entered by the engine's forward, engine.py:3006)
documents "torch.autocast is enabled outside DeepSpeed but disabled within the DeepSpeed
engine" and enters torch.autocast(device_type=<accelerator>, enabled=False); but whether a
region is open is asked with torch.is_autocast_enabled() without a device
(torch_autocast.py:107), which reads CUDA's flag, while the accelerator is "cpu".

Run from examples/wrappers/deepspeed in a venv with deepspeed (DS_ACCELERATOR=cpu is set
below): python defects/autocast_if_enabled_reads_cuda_flag.py. Exits 1 while it departs.
"""
import os
import socket
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
for key, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1").items():
    os.environ.setdefault(key, value)
if "MASTER_PORT" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.accelerator import get_accelerator  # noqa: E402
from deepspeed.runtime.torch_autocast import autocast_if_enabled  # noqa: E402

print("deepspeed", deepspeed.__version__, "torch", torch.__version__,
      "accelerator", get_accelerator().device_name())
deepspeed.init_distributed(dist_backend="gloo")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.seen = torch.is_autocast_enabled("cpu")
        return self.linear(x)


model = Model()
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                  config={"train_batch_size": 1, "torch_autocast": {"enabled": False}})
print("engine.torch_autocast_enabled():", engine.torch_autocast_enabled())
x = torch.randn(2, 4)


def inside_engine(cuda_flag: bool):
    """(CPU autocast inside the engine's forward, its output dtype, CPU autocast inside
    autocast_if_enabled(engine) itself), in a user CPU float16 region."""
    before = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", cuda_flag)
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            out = engine(x)
            with autocast_if_enabled(engine):
                direct = torch.is_autocast_enabled("cpu")
        return engine.module.seen, out.dtype, direct
    finally:
        torch.set_autocast_enabled("cuda", before)


off = inside_engine(cuda_flag=False)
on = inside_engine(cuda_flag=True)
print("user CPU float16 region, CUDA flag off: CPU autocast inside the engine's forward =", off[0],
      "output", off[1], "| inside autocast_if_enabled(engine) =", off[2])
print("user CPU float16 region, CUDA flag on : CPU autocast inside the engine's forward =", on[0],
      "output", on[1], "| inside autocast_if_enabled(engine) =", on[2])
departs = off[0] or off[2] or off != on
if departs:
    print("DEPARTS: the user's CPU region is not disabled within the engine (documented at "
          "torch_autocast.py:123), unless CUDA's autocast flag is set (torch_autocast.py:107)")
sys.exit(1 if departs else 0)
