"""torch._amp_foreach_non_finite_check_and_unscale_ on PyTorch/XLA rejects float16,
bfloat16 and float64 gradients: the lowering multiplies the gradient by the float32
inv_scale without a conversion, and XLA's HLO verifier refuses the graph ("Seen floating
point types of different precisions ... but mixed precision is disallowed"). PyTorch's CPU
and CUDA kernels unscale such gradients in place.

    PJRT_DEVICE=CPU python unscale_lower_precision.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

failed = False
for dtype in (torch.bfloat16, torch.float16, torch.float64):
    for device in ("cpu", torch_xla.device()):
        grad = torch.full((4, 4), 8.0, dtype=dtype, device=device)
        found_inf = torch.zeros(1, device=device)
        inv_scale = torch.full((1,), 0.25, device=device)
        try:
            torch._amp_foreach_non_finite_check_and_unscale_([grad], found_inf, inv_scale)
            print(f"{device} {dtype}: grad {grad[0, 0].item()}, found_inf {found_inf.item()}")
        except RuntimeError as exc:
            failed = True
            print(f"{device} {dtype}: RuntimeError: {str(exc).splitlines()[0][:160]}")
sys.exit(1 if failed else 0)
