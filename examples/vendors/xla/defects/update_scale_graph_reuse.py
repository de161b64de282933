"""torch._amp_update_scale_ on PyTorch/XLA reuses the graph compiled for its first
growth_factor / growth_interval: a later call with other factors computes with the first
ones. PyTorch's CPU kernel is the reference. (Every GradScaler check that meets a second
set of factors in the process fails through this: update, state_dict, resume, pickle.)

    PJRT_DEVICE=CPU python update_scale_graph_reuse.py    # exit 1 while XLA departs
"""
import sys

import torch
import torch_xla


def step(device, growth_factor, growth_interval):
    scale = torch.full((), 4.0, device=device)
    tracker = torch.full((), 0, dtype=torch.int32, device=device)
    found_inf = torch.full((), 0.0, device=device)
    torch._amp_update_scale_(scale, tracker, found_inf, growth_factor, 0.5, growth_interval)
    return scale.item(), int(tracker.item())


results = {}
for device in ("cpu", torch_xla.device()):
    results[str(device)] = [step(device, 2.0, 2000),  # GradScaler's defaults: a counting step
                            step(device, 2.0, 1),     # a growth step: (8.0, 0)
                            step(device, 3.0, 1)]     # another factor: (12.0, 0)
    print(f"{device}: {results[str(device)]}")
sys.exit(0 if results["cpu"] == results["xla:0"] else 1)
