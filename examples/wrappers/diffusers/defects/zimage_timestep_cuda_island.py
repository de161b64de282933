"""diffusers' Z-Image TimestepEmbedder.timestep_embedding (models/transformers/
transformer_z_image.py:53-54; the same block at :115, controlnets/controlnet_z_image.py:54
and :117, transformer_bria_fibo2.py:49) computes inside torch.amp.autocast("cuda",
enabled=False) whatever the tensors' device: on CPU it turns CUDA's autocast off and leaves
CPU's on inside its float32 block. (The output is float32 on CPU all the same: the block
holds only exp, mul, cos, sin and cat, which CPU autocast does not cast.)

Run as pasted in a virtualenv with torch and diffusers: prints the two devices' flags
inside the block and exits 1 while it departs.
"""

import sys

import diffusers
import torch
from diffusers.models.transformers.transformer_z_image import TimestepEmbedder

print("diffusers", diffusers.__version__, "torch", torch.__version__)
seen = []
original = torch.cat


def spy(*args, **kwargs):
    seen.append({d: torch.is_autocast_enabled(d) for d in ("cpu", "cuda")})
    return original(*args, **kwargs)


torch.cat = spy
previous = torch.is_autocast_enabled("cuda")
torch.set_autocast_enabled("cuda", True)  # CUDA's flag on, as another part of a program may leave it
try:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = TimestepEmbedder.timestep_embedding(torch.tensor([1.0, 500.0]), 16)
finally:
    torch.cat = original
    torch.set_autocast_enabled("cuda", previous)
inside = seen[-1]
print("output", out.dtype, "| inside its autocast-off block: cpu autocast", inside["cpu"],
      "| cuda autocast", inside["cuda"])
if inside["cpu"] or not inside["cuda"]:
    print("DEPARTS: the block turns CUDA's autocast off for CPU tensors and leaves CPU's on")
    sys.exit(1)
