"""torch.softmax / torch.log_softmax of an int64 tensor: PyTorch's CPU kernel raises at the
call ("softmax_lastdim_kernel_impl" not implemented for 'Long'); PyTorch/XLA accepts the call
and fails only when the graph is lowered, at the first read of a value, far from the call
("Error while lowering: ... aten::softmax ... Expected element type in shape to be floating
or complex for exponential operation; got S64"). Met by the policy properties, which give
the fp32 ops integer inputs to check that autocast leaves them alone and that the call then
fails as it does outside autocast.

    PJRT_DEVICE=CPU python softmax_integer_input.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

at_call = {}
for device in ("cpu", torch_xla.device()):
    x = torch.ones(1, 1, dtype=torch.int64, device=device)
    try:
        out = torch.softmax(x, 0)
    except RuntimeError as exc:
        at_call[str(device)] = True
        print(f"{device}: raised at the call: {str(exc).splitlines()[0][:120]}")
        continue
    at_call[str(device)] = False
    try:
        print(f"{device}: the call returned {out.dtype}; reading it gives {out.cpu().tolist()}")
    except RuntimeError as exc:
        print(f"{device}: the call returned; reading it raised: {str(exc).splitlines()[0][:150]}")
sys.exit(0 if at_call["cpu"] == at_call["xla:0"] else 1)
