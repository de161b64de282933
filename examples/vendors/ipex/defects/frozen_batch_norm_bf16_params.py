"""torch.ops.torch_ipex.frozen_batch_norm (IPEX's FrozenBatchNorm2d) with bfloat16 weight,
bias, running_mean and running_var reads them as float32: channel 0 uses the first two
bfloat16 values of each read as one float32, the other channels read past the end of the
buffers, so the output is wrong (by up to 1e25 here) and depends on what lies beside them
in memory: the same call on the same values gives another result where the tensors sit
elsewhere (slices of a stacked batch, as torch.func.vmap's fallback passes them). With
float32 parameters (FrozenBatchNorm2d's own buffers) and a bfloat16 input it is right. No
autocast needed; a FrozenBatchNorm2d moved to bfloat16 (``module.bfloat16()``) meets it.

PyTorch's result is its own batch_norm in eval mode on the same bfloat16 tensors, from a
child process that does not import IPEX (IPEX cannot be unloaded from a process).

    python frozen_batch_norm_bf16_params.py    # exit 1 while IPEX departs
"""
import json
import subprocess
import sys

import torch


def tensors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 4, 4, generator=g)
    weight, bias, mean = (torch.randn(3, generator=g) for _ in range(3))
    var = torch.rand(3, generator=g) + 0.5
    return x.bfloat16(), [t.bfloat16() for t in (weight, bias, mean, var)]


def per_channel(out):
    """The output's largest magnitude per channel, as a number JSON keeps (nan, inf too)."""
    return [str(round(out[:, c].float().abs().max().item(), 3)) for c in range(3)]


def stock():
    x, (weight, bias, mean, var) = tensors()
    out = torch.nn.functional.batch_norm(x, mean, var, weight, bias, False, 0.0, 1e-5)
    return per_channel(out)


def ipex():
    op = torch.ops.torch_ipex.frozen_batch_norm
    x, params = tensors()
    stacked = [torch.stack([p, p]) for p in params]  # the same values, elsewhere in memory
    return {"bfloat16 parameters": per_channel(op(x, *params, 1e-5)),
            "the same, slices of a stacked batch": per_channel(op(x, *(s[1] for s in stacked),
                                                                  1e-5)),
            "float32 parameters": per_channel(op(x, *(p.float() for p in params), 1e-5))}


if __name__ == "__main__":
    if sys.argv[1:] == ["--stock"]:
        print(json.dumps(stock()))
        sys.exit(0)
    expected = json.loads(subprocess.run([sys.executable, __file__, "--stock"], check=True,
                                         capture_output=True, text=True).stdout)
    import warnings
    warnings.filterwarnings("ignore")
    import intel_extension_for_pytorch

    observed = ipex()
    print(f"torch {torch.__version__}, intel_extension_for_pytorch "
          f"{intel_extension_for_pytorch.__version__}")
    print(f"max |output| per channel, bfloat16 input: torch batch_norm {expected}")
    for how, got in observed.items():
        print(f"  torch_ipex::frozen_batch_norm, {how}: {got}")
    near = all(abs(float(a) - float(b)) <= 0.05 * max(1.0, abs(float(b)))
               for got in observed.values() for a, b in zip(got, expected, strict=True))
    sys.exit(0 if near else 1)
