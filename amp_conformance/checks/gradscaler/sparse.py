"""GradScaler with sparse gradients (``nn.Embedding(sparse=True)`` and the like).

The scaler unscales a sparse COO gradient through its values. A float16 gradient may be
uncoalesced (an index repeated), and its values may be finite while their sum, which the
optimizer applies, overflows; so the scaler coalesces float16 sparse gradients before
checking them. float32 gradients go through the public ``unscale_``/``step``; float16
ones through ``_unscale_grads_(..., allow_fp16=True)``, as PyTorch's own
test_grad_scaling_unscale_sparse does (the public ``unscale_`` refuses float16
gradients, and fused optimizers, which take that path, do not accept sparse ones).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from amp_conformance.checks.gradscaler.cases import SparseCase
from amp_conformance.core.compare import close
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

SCALE = 4.0


def _sparse(case: SparseCase, device: str) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor(case.indices), torch.tensor(case.values),
                                   (2, 3), dtype=getattr(torch, case.dtype), device=device,
                                   check_invariants=True)


def _where(case: SparseCase, device: str, method: str) -> str:
    return (f"GradScaler.{method} (sparse gradients) on {device}, case {case.id!r} "
            f"({case.why}; {case.dtype} values {list(case.values)} at indices "
            f"{[list(i) for i in case.indices]}, scale {SCALE})")


def check_sparse(device: str, case: SparseCase) -> None:
    """found_inf, and the unscaled gradient, of one sparse case."""
    dtype = getattr(torch, case.dtype)
    p = torch.nn.Parameter(torch.zeros(2, 3, dtype=dtype, device=device))
    opt = torch.optim.SGD([p], lr=1.0)
    scaler = torch.amp.GradScaler(device, init_scale=SCALE)
    scaler.scale(torch.ones((), device=device))  # make the scale tensor
    p.grad = _sparse(case, device)
    expected = (_sparse(case, "cpu").to_dense().float() / SCALE).to(dtype)
    if dtype == torch.float16:
        _check_float16(device, case, scaler, opt, p, expected)
        return
    where = _where(case, device, "unscale_/step")
    result = scaler.step(opt)
    scaler.update()
    if case.found_inf:
        if result is not None or bool(p.detach().ne(0).any()) or scaler.get_scale() != SCALE / 2:
            raise ConformanceFailure(f"{where}: the step was not skipped (parameters "
                                     f"{p.detach().cpu()!r}, scale {scaler.get_scale()}), "
                                     "though a value is not finite")
        return
    if not torch.equal(p.detach().cpu(), -expected):
        raise ConformanceFailure(f"{where}: parameters after the step (lr 1) are "
                                 f"{p.detach().cpu()!r}, expected {-expected!r}")


def _check_float16(device: str, case: SparseCase, scaler: torch.amp.GradScaler,
                   opt: torch.optim.Optimizer, p: torch.nn.Parameter,
                   expected: torch.Tensor) -> None:
    where = _where(case, device, "_unscale_grads_")
    found_inf = torch.zeros((), dtype=torch.float32, device=device)
    inv_scale = torch.full((), 1 / SCALE, dtype=torch.float32, device=device)
    per_device = scaler._unscale_grads_(opt, inv_scale, found_inf, True)  # copies found_inf
    got = sum(v.item() for v in per_device.values())
    if got != case.found_inf:
        raise ConformanceFailure(f"{where}: found_inf is {got}, expected "
                                 f"{case.found_inf} (an uncoalesced float16 gradient is "
                                 "checked after coalescing)")
    if not p.grad.is_coalesced():
        raise ConformanceFailure(f"{where}: the float16 sparse gradient was left uncoalesced")
    if not case.found_inf and not torch.equal(p.grad.to_dense().cpu(), expected):
        raise ConformanceFailure(f"{where}: unscaled gradient {p.grad.to_dense().cpu()!r}, "
                                 f"expected {expected!r}")


def _embedding_run(target: Target, dtype: torch.dtype, scaled: bool) -> list[torch.Tensor]:
    device = target.device
    gen = torch.Generator().manual_seed(0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(torch.randn(10, 4, generator=gen))
    emb = emb.to(device)
    lin = torch.randn(4, 4, generator=gen).to(device)
    opt = torch.optim.SGD(emb.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device, init_scale=128.0, growth_interval=1)
    out = []
    for step, idx in enumerate(([1, 1, 2], [3, 4, 3], [1, 5, 5], [0, 9, 2])):
        opt.zero_grad()
        with target.autocast(dtype):
            loss = F.mse_loss((emb(torch.tensor(idx, device=device)) @ lin).float(),
                              torch.ones(3, 4, device=device))
        if scaled:
            scaler.scale(loss).backward()
            if step == 2:
                emb.weight.grad = emb.weight.grad * math.inf
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if step != 2:
                opt.step()
        out.append(emb.weight.detach().cpu().clone())
    return out


def check_sparse_embedding(target: Target, dtype: torch.dtype) -> None:
    """An Embedding(sparse=True) trained under autocast with the scaler equals the
    unscaled control; the step with an inf gradient is skipped."""
    where = (f"GradScaler.step/update with sparse Embedding gradients under "
             f"autocast({target.device!r}, {dtype})")
    scaled = _embedding_run(target, dtype, True)
    control = _embedding_run(target, dtype, False)
    if not torch.equal(scaled[2], scaled[1]):
        raise ConformanceFailure(f"{where}: step 2 has an inf gradient and must be skipped, "
                                 "but the embedding weight changed")
    for step, (a, b) in enumerate(zip(scaled, control, strict=True)):
        said = close(a, b, rtol=1e-5, atol=1e-6)
        if said is not None:
            raise ConformanceFailure(f"{where}: after step {step} the weight differs from the "
                                     f"unscaled control:\n{said}")
