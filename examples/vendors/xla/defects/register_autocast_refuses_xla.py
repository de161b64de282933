"""torch.library.register_autocast refuses device 'xla' on torch 2.9.0 (the torch that
torch-xla 2.9.0 pins): "ValueError: Unknown device type: xla", by each of its three routes
(torch.library.register_autocast on a custom_op, CustomOpDef.register_autocast, and
register_autocast(qualname, ..., lib=...) on an op defined with torch.library.Library).
torch.autocast("xla") itself works, and so does an AutocastXLA kernel registered with
Library.impl, so the device has what the rule needs: torch 2.9's register_autocast accepts
"cpu" and "cuda" only (torch/_library/custom_ops.py), which PyTorch PR #183689 lifts. Not a
departure of torch_xla's kernels: of the torch it pins, met by every backend but cpu and cuda.

    PJRT_DEVICE=CPU python register_autocast_refuses_xla.py    # exit 1 while torch refuses
"""
import sys

import torch
import torch_xla

NS = "amp_defect_register_autocast"


@torch.library.custom_op(f"{NS}::mm_a", mutates_args=())
def mm_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


@torch.library.custom_op(f"{NS}::mm_b", mutates_args=())
def mm_b(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


lib = torch.library.Library(NS, "DEF")
lib.define("mm_c(Tensor a, Tensor b) -> Tensor")
lib.impl("mm_c", lambda a, b: a @ b, "CompositeExplicitAutograd")
lib.define("mm_d(Tensor a, Tensor b) -> Tensor")
lib.impl("mm_d", lambda a, b: a @ b, "CompositeExplicitAutograd")

below = torch._C.DispatchKeySet(torch._C._dispatch_key_parse("AutocastXLA"))


def autocast_kernel(a, b):  # what a backend registers: cast, then call below the key
    with torch._C._ExcludeDispatchKeyGuard(below):
        return torch.ops.amp_defect_register_autocast.mm_d(a.bfloat16(), b.bfloat16())


lib.impl("mm_d", autocast_kernel, "AutocastXLA")

routes = {
    "torch.library.register_autocast(custom_op, 'xla', bfloat16)":
        lambda: torch.library.register_autocast(mm_a, "xla", torch.bfloat16),
    "CustomOpDef.register_autocast('xla', bfloat16)":
        lambda: mm_b.register_autocast("xla", torch.bfloat16),
    "torch.library.register_autocast(qualname, 'xla', bfloat16, lib=...)":
        lambda: torch.library.register_autocast(f"{NS}::mm_c", "xla", torch.bfloat16, lib=lib),
}
refused = 0
print(f"torch {torch.__version__}, torch_xla {torch_xla.__version__}")
for how, register in routes.items():
    try:
        register()
        print(f"{how}: registered")
    except ValueError as exc:
        refused += 1
        print(f"{how}: refused: ValueError: {exc}")
a = torch.randn(4, 4, device=torch_xla.device())
with torch.autocast("xla", dtype=torch.bfloat16):
    print(f"torch.autocast('xla', bfloat16): torch.mm gives {torch.mm(a, a).dtype}; "
          f"an AutocastXLA kernel by Library.impl gives "
          f"{torch.ops.amp_defect_register_autocast.mm_d(a, a).dtype}")
sys.exit(1 if refused else 0)
