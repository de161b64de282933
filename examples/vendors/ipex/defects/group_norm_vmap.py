"""torch.nn.functional.group_norm under bfloat16 autocast on CPU: IPEX's AutocastCPU kernel
(bfloat16: lower precision; stock torch 2.8 has none) gives bfloat16, but inside
torch.func.vmap the call gives float32: functorch decomposes group_norm (a
CompositeImplicitAutograd op) before the Autocast key, into ops that have no autocast
kernel. This is PyTorch's own mechanism (the suite's reference defect
func-vmap-skips-autocast, oplists/transforms.toml, which lists layer_norm, softmax, ... for
the same reason) met by IPEX's new kernel: with stock torch the two calls agree (float32).

Stock PyTorch's result comes from a child process that does not import IPEX.

    python group_norm_vmap.py    # exit 1 while the two calls disagree under IPEX
"""
import json
import subprocess
import sys

import torch


def observe():
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 4, 3, 3, generator=g)   # a batch of 3 for vmap
    w, b = torch.ones(4), torch.zeros(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = F.group_norm(x[0], 2, w, b).dtype
        mapped = torch.func.vmap(lambda t: F.group_norm(t, 2, w, b))(x).dtype
    return {"untransformed": str(plain), "vmap": str(mapped)}


if __name__ == "__main__":
    if sys.argv[1:] == ["--stock"]:
        print(json.dumps(observe()))
        sys.exit(0)
    stock = json.loads(subprocess.run([sys.executable, __file__, "--stock"], check=True,
                                      capture_output=True, text=True).stdout)
    import warnings
    warnings.filterwarnings("ignore")
    import intel_extension_for_pytorch as ipex
    with_ipex = observe()
    print(f"torch {torch.__version__}, intel_extension_for_pytorch {ipex.__version__}")
    print(f"stock: {stock}")
    print(f"ipex:  {with_ipex}")
    sys.exit(0 if with_ipex["untransformed"] == with_ipex["vmap"] else 1)
