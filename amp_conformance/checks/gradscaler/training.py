"""Scaled training against an unscaled control: what GradScaler is for.

A tiny model trains a few steps with ``GradScaler`` and, separately, without it (the
control: same autocast, same optimizer, plain ``backward()``). The scale is a power of
two and the model's gradients stay far from float16's limits, so scaling then unscaling
is exact and the two runs agree to :data:`TOLERANCE` (on CPU they agree bitwise; the
tolerance leaves room for a device whose kernels round differently for scaled inputs).
One step gets an inf planted in a gradient: the scaled run must skip exactly that step
(the control simply does not step there), for every optimizer, and the optimizer state
must not advance.

The workflows of PyTorch's own GradScaler tests (clipping, clipping after a separate
``unscale_``, gradient penalty, accumulation, several models and optimizers) run the same
way, without autocast: they check the scaler's arithmetic, not a cast policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from amp_conformance.checks.gradscaler.cases import OptimizerCase
from amp_conformance.checks.gradscaler.kernels import model_update
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

STEPS = 4
SKIP = 2  # the step whose gradients get an inf
INIT_SCALE = 128.0
#: stated tolerance of scaled against unscaled training (float32 parameters)
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
IMPLEMENTATIONS = {"foreach": {"foreach": True}, "fused": {"fused": True}}


def make_model(device: str, seed: int = 0) -> torch.nn.Sequential:
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.to(device)


def make_data(device: str, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 8, generator=gen).to(device), torch.randn(8, 8, generator=gen).to(device))
            for _ in range(STEPS)]


def expected_scales(flags: list[bool], growth_interval: int = 1) -> list[float]:
    """The scale after each update, from the update rule."""
    scale, tracker, out = INIT_SCALE, 0, []
    for flag in flags:
        step = model_update(scale, tracker, float(flag), 2.0, 0.5, growth_interval)
        scale, tracker = step.scale, step.tracker
        out.append(scale)
    return out


def _snapshot(models: list[torch.nn.Module]) -> list[torch.Tensor]:
    return [p.detach().clone() for m in models for p in m.parameters()]


def _names(models: list[torch.nn.Module]) -> list[str]:
    return [f"model{i}.{n}" for i, m in enumerate(models) for n, _ in m.named_parameters()]


@dataclass
class Trace:
    """Parameters after every step, scales after every update, the final optimizers."""

    params: list[list[torch.Tensor]] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)


def compare_runs(where: str, scaled: Trace, control: Trace, names: list[str]) -> None:
    """Scaled and control parameters agree after every step, within TOLERANCE."""
    for step, (got, want) in enumerate(zip(scaled.params, control.params, strict=True)):
        for name, a, b in zip(names, got, want, strict=True):
            try:
                torch.testing.assert_close(a, b, **TOLERANCE)
            except AssertionError as exc:
                raise ConformanceFailure(
                    f"{where}: after step {step} parameter {name} differs from the unscaled "
                    f"control beyond rtol={TOLERANCE['rtol']}, atol={TOLERANCE['atol']}:\n"
                    f"{exc}") from None


def _state_tensors(opt: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
    out = []
    for i, p in enumerate(opt.param_groups[0]["params"]):
        for key, value in sorted(opt.state[p].items()):
            if isinstance(value, torch.Tensor):
                out.append((f"param {i} {key!r}", value.detach().float().cpu()))
    return out


def compare_states(where: str, scaled: torch.optim.Optimizer,
                   control: torch.optim.Optimizer) -> None:
    """The optimizer's state (step counts, moments, momentum) agrees with the control's:
    a skipped step must not advance it."""
    got, want = _state_tensors(scaled), _state_tensors(control)
    if [k for k, _ in got] != [k for k, _ in want]:
        raise ConformanceFailure(f"{where}: optimizer state keys {[k for k, _ in got]}, the "
                                 f"control's {[k for k, _ in want]}")
    for (key, a), (_, b) in zip(got, want, strict=True):
        try:
            torch.testing.assert_close(a, b, **TOLERANCE)
        except AssertionError as exc:
            raise ConformanceFailure(f"{where}: optimizer state {key} differs from the "
                                     f"control's (a skipped step must not advance the "
                                     f"optimizer's state):\n{exc}") from None


# -- the scaled training check -------------------------------------------------------------


def make_optimizer(case: OptimizerCase, impl: str, params, device: str) -> torch.optim.Optimizer:
    try:
        return case.make(params, **IMPLEMENTATIONS[impl])
    except (RuntimeError, ValueError) as exc:
        hint = (" (a device without fused optimizers declares the capability "
                "fused_optimizers = false)") if impl == "fused" else ""
        raise ConformanceFailure(f"torch.optim.{case.name}({impl}=True) refused parameters on "
                                 f"{device}: {exc}{hint}") from None


def train(target: Target, dtype: torch.dtype, case: OptimizerCase, impl: str,
          scaled: bool) -> Trace:
    device = target.device
    model, data = make_model(device), make_data(device)
    opt = make_optimizer(case, impl, model.parameters(), device)
    scaler = (torch.amp.GradScaler(device, init_scale=INIT_SCALE, growth_interval=1)
              if scaled else None)
    trace = Trace(optimizers=[opt])
    for i, (x, y) in enumerate(data):
        opt.zero_grad()
        with target.autocast(dtype):
            loss = F.mse_loss(model(x).float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            if i == SKIP:
                model[1].weight.grad.fill_(math.inf)
            scaler.step(opt)
            scaler.update()
            trace.scales.append(scaler.get_scale())
        else:
            loss.backward()
            if i != SKIP:
                opt.step()
        trace.params.append(_snapshot([model]))
    return trace


def check_training(target: Target, dtype: torch.dtype, case: OptimizerCase, impl: str) -> None:
    """Scaled training equals the control; the step with an inf is skipped exactly."""
    device = target.device
    label = f"{case.name}({impl}=True)"
    where = (f"GradScaler.step/update with torch.optim.{label} under autocast({device!r}, "
             f"{dtype})")
    scaled = train(target, dtype, case, impl, scaled=True)
    control = train(target, dtype, case, impl, scaled=False)
    names = _names([make_model("cpu")])
    for name, after, before in zip(names, scaled.params[SKIP], scaled.params[SKIP - 1],
                                   strict=True):
        if not torch.equal(after, before):
            raise ConformanceFailure(f"GradScaler.step on {device} with torch.optim.{label} "
                                     f"under autocast {dtype}: step {SKIP} has an inf gradient "
                                     f"and must be skipped, but parameter {name} changed")
    want = expected_scales([i == SKIP for i in range(STEPS)])
    if scaled.scales != want:
        raise ConformanceFailure(f"GradScaler.update on {device} with torch.optim.{label} "
                                 f"under autocast {dtype}: "
                                 f"scales {scaled.scales} after the steps, expected {want} "
                                 f"(growth_interval 1, an inf at step {SKIP})")
    compare_runs(where, scaled, control, names)
    compare_states(where, scaled.optimizers[0], control.optimizers[0])


# -- PyTorch's GradScaler workflows ----------------------------------------------------------

MAX_NORM = 0.2
ACCUMULATE = 2


@dataclass
class Loop:
    """One run of a workflow: its models, optimizers and (scaled runs) scaler."""

    models: list[torch.nn.Module]
    opts: list[torch.optim.Optimizer]
    scaler: torch.amp.GradScaler | None

    def inject(self, i: int, model: int = 0) -> None:
        if self.scaler is not None and i == SKIP:
            self.models[model][1].weight.grad.fill_(math.inf)

    def finish(self, i: int, trace: Trace, skip_opts: tuple[int, ...] = (0,)) -> None:
        """Step every optimizer (the control leaves out ``skip_opts`` at SKIP) and update."""
        for k, opt in enumerate(self.opts):
            if self.scaler is not None:
                self.scaler.step(opt)
            elif not (i == SKIP and k in skip_opts):
                opt.step()
        if self.scaler is not None:
            self.scaler.update()
            trace.scales.append(self.scaler.get_scale())

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward(**kwargs)


def _clipping(loop: Loop, i: int, x, y, trace: Trace) -> None:
    model, opt, scaler = loop.models[0], loop.opts[0], loop.scaler
    opt.zero_grad()
    loop.backward(F.mse_loss(model(x), y))
    factor = scaler.get_scale() if scaler is not None else 1.0
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM * factor)
    loop.inject(i)
    loop.finish(i, trace)


def _clipping_separate_unscale(loop: Loop, i: int, x, y, trace: Trace) -> None:
    model, opt = loop.models[0], loop.opts[0]
    opt.zero_grad()
    loop.backward(F.mse_loss(model(x), y))
    loop.inject(i)
    if loop.scaler is not None:
        loop.scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, error_if_nonfinite=False)
    loop.finish(i, trace)


def _penalty(loop: Loop, i: int, x, y, trace: Trace) -> None:
    model, opt, scaler = loop.models[0], loop.opts[0], loop.scaler
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    params = list(model.parameters())
    if scaler is not None:
        grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
        inv = 1.0 / scaler.get_scale()
        grads = [g * inv for g in grads]
    else:
        grads = torch.autograd.grad(loss, params, create_graph=True)
    penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
    loop.backward(loss + penalty)
    loop.inject(i)
    loop.finish(i, trace)


def _accumulation(loop: Loop, i: int, x, y, trace: Trace) -> None:
    model, opt = loop.models[0], loop.opts[0]
    loop.backward(F.mse_loss(model(x), y) / ACCUMULATE)
    if (i + 1) % ACCUMULATE == 0:
        loop.finish(-1, trace)  # no inf here: PyTorch's accumulation test plants none
        opt.zero_grad()


def _multiple(loop: Loop, i: int, x, y, trace: Trace) -> None:
    for opt in loop.opts:
        opt.zero_grad()
    out0, out1 = loop.models[0](x), loop.models[1](x)
    loop.backward(F.mse_loss(0.3 * out0 + 0.7 * out1, y), retain_graph=True)
    loop.backward(F.mse_loss(0.6 * out0 - 0.4 * out1, y))
    loop.inject(i, model=1)
    if loop.scaler is not None:
        loop.scaler.unscale_(loop.opts[0])  # one optimizer unscaled separately
    loop.finish(i, trace, skip_opts=(1,))  # the inf is in model 1: only its step is skipped


#: workflow -> (iteration, number of models, which updates see an inf)
WORKFLOW_STEPS: dict[str, tuple[Callable, int, list[bool]]] = {
    "clipping": (_clipping, 1, [i == SKIP for i in range(STEPS)]),
    "clipping-separate-unscale": (_clipping_separate_unscale, 1,
                                  [i == SKIP for i in range(STEPS)]),
    "penalty": (_penalty, 1, [i == SKIP for i in range(STEPS)]),
    "accumulation": (_accumulation, 1, [False] * (STEPS // ACCUMULATE)),
    "multiple": (_multiple, 2, [i == SKIP for i in range(STEPS)]),
}


def run_workflow(device: str, name: str, scaled: bool) -> Trace:
    iteration, count, _ = WORKFLOW_STEPS[name]
    models = [make_model(device, seed=k) for k in range(count)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scaler = (torch.amp.GradScaler(device, init_scale=INIT_SCALE, growth_interval=1)
              if scaled else None)
    loop, trace = Loop(models, opts, scaler), Trace(optimizers=opts)
    for i, (x, y) in enumerate(make_data(device)):
        iteration(loop, i, x, y, trace)
        trace.params.append(_snapshot(models))
    return trace


def check_workflow(device: str, name: str) -> None:
    """A workflow scaled equals it unscaled (the control skips the step the inf spoils)."""
    _, count, flags = WORKFLOW_STEPS[name]
    where = f"GradScaler in the {name!r} workflow on {device}"
    scaled, control = run_workflow(device, name, True), run_workflow(device, name, False)
    want = expected_scales(flags)
    if scaled.scales != want:
        raise ConformanceFailure(f"{where}: GradScaler.update gave scales {scaled.scales}, "
                                 f"expected {want}")
    compare_runs(where, scaled, control,
                 _names([make_model("cpu", seed=k) for k in range(count)]))
