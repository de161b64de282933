"""torch.func.grad (and jacrev) through layer_norm or group_norm give zero gradients once
intel_extension_for_pytorch is imported; torch.autograd gives the right ones (with a
warning, "aten::layer_norm: an autograd kernel was not registered to the Autograd key(s)").
No autocast needed: float32, on CPU.

Why: aten::layer_norm and aten::group_norm are CompositeImplicitAutograd ops in PyTorch;
IPEX registers CPU kernels for them (csrc/cpu/aten/LayerNorm.cpp:203, GroupNorm.cpp:238), so AutogradCPU
no longer gets the composite kernel and the call reaches IPEX's kernel through autograd's
not-implemented fallback: autograd still records the ops it calls, functorch's transforms
do not, and see a constant.

Stock PyTorch's result comes from a child process that does not import IPEX (IPEX cannot
be unloaded from a process).

    python func_grad_composite_norm.py    # exit 1 while IPEX departs
"""
import json
import subprocess
import sys

import torch


def observe():
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 3, 3, generator=g)
    w = torch.randn(4, generator=g)
    b = torch.randn(4, generator=g)
    r = torch.randn(2, 4, 3, 3, generator=g)
    calls = {"layer_norm": lambda x, w: F.layer_norm(x, [3], w[:3], b[:3]),
             "group_norm": lambda x, w: F.group_norm(x, 2, w, b)}
    out = {}
    for name, fn in calls.items():
        def loss(x, w, fn=fn):
            return (fn(x, w) * r).sum()
        gx, gw = torch.func.grad(loss, argnums=(0, 1))(x, w)
        xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
        loss(xa, wa).backward()
        out[name] = {"func.grad |dx|": round(gx.abs().sum().item(), 4),
                     "autograd |dx|": round(xa.grad.abs().sum().item(), 4),
                     "func.grad |dw|": round(gw.abs().sum().item(), 4),
                     "autograd |dw|": round(wa.grad.abs().sum().item(), 4)}
    return out


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
    for name in stock:
        print(f"{name}: stock {stock[name]}")
        print(f"{name}: ipex  {with_ipex[name]}")
    sys.exit(0 if stock == with_ipex else 1)
