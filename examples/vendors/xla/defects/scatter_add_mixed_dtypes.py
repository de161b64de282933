"""torch.scatter_add with self and src of different dtypes on PyTorch/XLA: the call is
accepted and the graph fails in XLA's HLO verifier when it runs ("Seen floating point types
of different precisions in %scatter ... but mixed precision is disallowed"). PyTorch checks
the dtypes at the call and raises "scatter(): Expected self.dtype to be equal to
src.dtype". Outside autocast; XLA has no scatter_add autocast kernel.

    PJRT_DEVICE=CPU python scatter_add_mixed_dtypes.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla

said = {}
for device in ("cpu", torch_xla.device()):
    self_ = torch.zeros(2, 2, 2, device=device)
    index = torch.zeros(2, 2, 2, dtype=torch.int64, device=device)
    src = torch.ones(2, 2, 2, dtype=torch.bfloat16, device=device)
    try:
        out = torch.scatter_add(self_, 0, index, src)
        said[str(device)] = f"ran: {out.dtype} {out.sum().item()}"
    except RuntimeError as exc:
        said[str(device)] = f"RuntimeError: {str(exc).splitlines()[0][:150]}"
    print(f"{device}: {said[str(device)]}")
sys.exit(0 if said["xla:0"].startswith("RuntimeError: scatter(): Expected self.dtype") else 1)
