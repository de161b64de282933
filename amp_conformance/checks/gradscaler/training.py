"""Scaled training against an unscaled control: what GradScaler is for.

A tiny model trains a few steps with ``GradScaler`` and, separately, without it (the
control: same autocast, same optimizer, plain ``backward()``). The scale is a power of
two and the model's gradients stay far from float16's limits, so scaling then unscaling
is exact and the two runs agree to :data:`TOLERANCE` (on CPU they agree bitwise; the
tolerance leaves room for a device whose kernels round differently for scaled inputs).
Each documented call order (``cases.ORDERS``: with ``unscale_`` before ``step``, with
clipping between them, two optimizers and one scaler) runs with torch.optim's plain,
foreach and fused implementations; one step gets an inf planted in a gradient, a later
one a nan: the scaled run must skip exactly those steps of the optimizer that owns the
gradient (the control simply does not take them), its state must not advance, and a
fused step after ``unscale_`` must not unscale again.

The workflows of PyTorch's own GradScaler tests (clipping, clipping after a separate
``unscale_``, gradient penalty, accumulation, several models and optimizers) run the same
way, without autocast: they check the scaler's arithmetic, not a cast policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from amp_conformance.checks.gradscaler.cases import IMPLEMENTATIONS, OPTIMIZERS, ORDERS, OptimizerCase
from amp_conformance.checks.gradscaler.kernels import model_update
from amp_conformance.core.compare import close
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

STEPS = 4
SKIP = 2  # the step whose gradients get an inf
INIT_SCALE = 128.0
#: stated tolerance of scaled against unscaled training (float32 parameters)
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
MAX_NORM = 0.2  # gradient clipping's bound (it clips the model's gradients at every step)


def make_model(device: str, seed: int = 0) -> torch.nn.Sequential:
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.to(device)


def make_data(device: str, seed: int = 1,
              steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 8, generator=gen).to(device), torch.randn(8, 8, generator=gen).to(device))
            for _ in range(steps)]


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
            said = close(a, b, **TOLERANCE)
            if said is not None:
                raise ConformanceFailure(
                    f"{where}: after step {step} parameter {name} differs from the unscaled "
                    f"control beyond rtol={TOLERANCE['rtol']}, atol={TOLERANCE['atol']}:\n"
                    f"{said}")


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
        said = close(a, b, **TOLERANCE)
        if said is not None:
            raise ConformanceFailure(f"{where}: optimizer state {key} differs from the "
                                     f"control's (a skipped step must not advance the "
                                     f"optimizer's state):\n{said}")


# -- the scaled training check -------------------------------------------------------------

#: training steps of the check, and the steps whose gradients get a non-finite value:
#: step -> (the value, the layer of the model whose weight gradient holds it)
TRAIN_STEPS = 6
PLANTS: dict[int, tuple[float, int]] = {2: (math.inf, 1), 4: (math.nan, 0)}


def make_optimizer(case: OptimizerCase, impl: str, params, device: str) -> torch.optim.Optimizer:
    try:
        return case.make(params, **IMPLEMENTATIONS[impl])
    except (RuntimeError, ValueError) as exc:
        hint = (" (a device without fused optimizers declares the capability "
                "fused_optimizers = false)") if impl == "fused" else ""
        raise ConformanceFailure(f"torch.optim.{label(case, impl)} refused parameters on "
                                 f"{device}: {exc}{hint}") from None


def refusal(case: OptimizerCase, impl: str, device: str) -> BaseException | None:
    """What one step of the optimizer raises on ``device`` with no scaler and no autocast
    (a gradient set by hand), or None: evidence that a failure is the optimizer's own."""
    p = torch.nn.Parameter(torch.ones(4, device=device))
    p.grad = torch.ones(4, device=device)
    try:
        case.make([p], **IMPLEMENTATIONS[impl]).step()
    except Exception as exc:  # noqa: BLE001 - what it raised is the evidence
        return exc
    return None


def label(case: OptimizerCase, impl: str) -> str:
    return case.name + "(" + ", ".join(f"{k}={v}" for k, v in IMPLEMENTATIONS[impl].items()) + ")"


def owner(order: str, layer: int) -> int:
    """The optimizer that updates a layer: with two optimizers, one per layer."""
    return layer if order == "two_optimizers" else 0


def _value_name(value: float) -> str:
    return "a nan" if math.isnan(value) else "an inf"


def train(target: Target, dtype: torch.dtype, case: OptimizerCase, impl: str, order: str,
          scaled: bool) -> Trace:
    """TRAIN_STEPS steps in ``order``; the control (``scaled=False``) backpropagates the
    plain loss and leaves out the step of each optimizer whose gradients PLANTS spoils."""
    device = target.device
    model, data = make_model(device), make_data(device, steps=TRAIN_STEPS)
    groups = ([model[0].parameters(), model[1].parameters()] if order == "two_optimizers"
              else [model.parameters()])
    opts = [make_optimizer(case, impl, group, device) for group in groups]
    scaler = (torch.amp.GradScaler(device, init_scale=INIT_SCALE, growth_interval=1)
              if scaled else None)
    trace = Trace(optimizers=opts)
    for i, (x, y) in enumerate(data):
        for opt in opts:
            opt.zero_grad()
        with target.autocast(dtype):
            loss = F.mse_loss(model(x).float(), y)
        plant = PLANTS.get(i)
        if scaler is None:
            loss.backward()
            if order == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            for k, opt in enumerate(opts):
                if plant is None or owner(order, plant[1]) != k:
                    opt.step()
        else:
            scaler.scale(loss).backward()
            if plant is not None:
                model[plant[1]].weight.grad[0, 0] = plant[0]
            if order != "step":
                scaler.unscale_(opts[0])
            if order == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM,
                                               error_if_nonfinite=False)
            for opt in opts:
                scaler.step(opt)
            scaler.update()
            trace.scales.append(scaler.get_scale())
        trace.params.append(_snapshot([model]))
        target.end_step()
    return trace


def check_training(target: Target, dtype: torch.dtype, case: OptimizerCase, impl: str,
                   order: str = "step") -> None:
    """Scaled training in ``order`` equals the control: every step whose gradients hold an
    inf or a nan is skipped (for that step's optimizer only), every other step is unscaled
    exactly once, the scale follows the update rule, the optimizers' state keeps step."""
    device = target.device
    where = (f"torch.optim.{label(case, impl)} under autocast({device!r}, {dtype}), in the "
             f"order {ORDERS[order]}")
    scaled = train(target, dtype, case, impl, order, scaled=True)
    control = train(target, dtype, case, impl, order, scaled=False)
    names = _names([make_model("cpu")])
    for i, (value, layer) in PLANTS.items():
        k = owner(order, layer)
        for name, after, before in zip(names, scaled.params[i], scaled.params[i - 1],
                                       strict=True):
            if owner(order, int(name.split(".")[1])) == k and not torch.equal(after, before):
                raise ConformanceFailure(
                    f"GradScaler.step with {where}: step {i} has {_value_name(value)} in a "
                    f"gradient of optimizer {k} and must be skipped, but parameter {name} "
                    f"changed")
    want = expected_scales([i in PLANTS for i in range(TRAIN_STEPS)])
    if scaled.scales != want:
        raise ConformanceFailure(f"GradScaler.update with {where}: scales {scaled.scales} after "
                                 f"the steps, expected {want} (growth_interval 1, a "
                                 f"non-finite gradient at steps {sorted(PLANTS)})")
    compare_runs(f"GradScaler with {where}", scaled, control, names)
    for k, (got, control_opt) in enumerate(zip(scaled.optimizers, control.optimizers,
                                               strict=True)):
        compare_states(f"GradScaler with {where}, optimizer {k}", got, control_opt)


# -- PyTorch's GradScaler workflows ----------------------------------------------------------

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


def run_workflow(target: Target, name: str, scaled: bool) -> Trace:
    iteration, count, _ = WORKFLOW_STEPS[name]
    device = target.device
    models = [make_model(device, seed=k) for k in range(count)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    scaler = (torch.amp.GradScaler(device, init_scale=INIT_SCALE, growth_interval=1)
              if scaled else None)
    loop, trace = Loop(models, opts, scaler), Trace(optimizers=opts)
    for i, (x, y) in enumerate(make_data(device)):
        iteration(loop, i, x, y, trace)
        trace.params.append(_snapshot(models))
        target.end_step()
    return trace


def check_workflow(target: Target, name: str) -> None:
    """A workflow scaled equals it unscaled (the control skips the step the inf spoils)."""
    _, count, flags = WORKFLOW_STEPS[name]
    where = f"GradScaler in the {name!r} workflow on {target.device}"
    scaled, control = run_workflow(target, name, True), run_workflow(target, name, False)
    want = expected_scales(flags)
    if scaled.scales != want:
        raise ConformanceFailure(f"{where}: GradScaler.update gave scales {scaled.scales}, "
                                 f"expected {want}")
    compare_runs(where, scaled, control,
                 _names([make_model("cpu", seed=k) for k in range(count)]))


# -- a library's scaler, through the same orders ----------------------------------------------


def _plant_hook(value: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """A gradient hook planting ``value`` in a weight's gradient during backward: a scaler
    that runs backward itself (timm's NativeScaler) gets it where GradScaler would."""
    def hook(grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[0, 0] = value
        return grad
    return hook


def expected_from(state: dict, flags: list[bool]) -> list[float]:
    """The scale after each update from the factors a scaler's ``state_dict()`` reports."""
    scale, tracker, out = float(state["scale"]), int(state["_growth_tracker"]), []
    for flag in flags:
        step = model_update(scale, tracker, float(flag), float(state["growth_factor"]),
                            float(state["backoff_factor"]), int(state["growth_interval"]))
        scale, tracker = step.scale, step.tracker
        out.append(scale)
    return out


def train_declared(target: Target, dtype: torch.dtype, make: Callable[[str], Any],
                   step: Callable[..., Any], clip: float | None = None,
                   resume_at: int | None = None) -> tuple[Trace, list[dict]]:
    """TRAIN_STEPS steps of the control's model, data and optimizer (SGD with momentum,
    plain) with a declared scaler's ``step`` (``clip``: clipped to it after unscale_), the
    PLANTS spoiling their steps' gradients; ``resume_at``: from that step on, a fresh scaler
    that loaded the first one's ``state_dict()``. Returns the trace (scales read from
    ``state_dict()``) and the state dicts before the first step and at the resume."""
    device = target.device
    model, data = make_model(device), make_data(device, steps=TRAIN_STEPS)
    opt = make_optimizer(OPTIMIZERS[0], "plain", model.parameters(), device)
    scaler = make(device)
    states = [dict(scaler.state_dict())]
    trace = Trace(optimizers=[opt])
    for i, (x, y) in enumerate(data):
        if i == resume_at:
            saved = scaler.state_dict()
            scaler = make(device)
            scaler.load_state_dict(saved)
            states.append(dict(saved))
        opt.zero_grad()
        with target.autocast(dtype):
            loss = F.mse_loss(model(x).float(), y)
        plant = PLANTS.get(i)
        handle = model[plant[1]].weight.register_hook(_plant_hook(plant[0])) if plant else None
        try:
            step(scaler, loss, opt, list(model.parameters()), clip)
        finally:
            if handle is not None:
                handle.remove()
        trace.scales.append(float(scaler.state_dict().get("scale", math.nan)))
        trace.params.append(_snapshot([model]))
        target.end_step()
    return trace, states
