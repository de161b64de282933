"""What callers of ``torch.amp.GradScaler`` rely on across calls, beyond one training step.

- The state tensors (the scale, the growth tracker) are made once and then updated in
  place by every method, so a reference a caller holds (a captured CUDA graph, a fused
  optimizer's ``grad_scale``) stays live.
- The growth and back-off setters change what the next ``update()`` does.
- An optimizer that unscales inside its own step (``_step_supports_amp_scaling``, the
  fused optimizers) gets ``grad_scale`` (the scale times a ``grad_scale`` it set itself;
  None once ``unscale_`` ran) and ``found_inf`` for that step only, and decides itself.
- One optimizer with gradients of several dtypes (and groups) is unscaled as one: a
  non-finite gradient of any dtype skips the step for all.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch

from amp_conformance.checks.gradscaler.scaler import W, _backward, _setup, _where
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

#: the scaler's state tensors a caller may hold, by attribute
STATE = ("_scale", "_growth_tracker")


def _held(scaler: torch.amp.GradScaler) -> dict[str, Any]:
    return {name: getattr(scaler, name, None) for name in STATE}


def check_state_identity(device: str) -> None:
    """After the first scale(), every method (unscale_, step, update growing, backing off
    and with a new scale as a float or a tensor, load_state_dict) keeps the same scale and
    growth-tracker tensors, changed in place."""
    scaler = torch.amp.GradScaler(device, init_scale=4.0, growth_interval=1)
    p, opt, w = _setup(device)
    _backward(scaler, p, w)
    held = _held(scaler)
    if any(t is None for t in held.values()):
        raise ConformanceFailure(f"{_where('scale', device)}: after the first scale() the "
                                 f"scaler holds {held}, expected a scale and a growth tracker")
    steps = [("unscale_, step and a growing update()", None, None),
             ("a step with an inf and a backing-off update()", math.inf, None),
             ("update(new_scale=100.0)", None, 100.0),
             ("update(new_scale=<tensor 50.0>)", None, torch.tensor(50.0, device=device))]
    for what, plant, new_scale in steps:
        before = scaler.get_scale()
        opt.zero_grad()
        _backward(scaler, p, w, plant)
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update(new_scale)
        _same(scaler, held, device, what, before)
    source = torch.amp.GradScaler(device, init_scale=3.0)
    scaler.load_state_dict(source.state_dict())
    _same(scaler, held, device, "load_state_dict()", None)
    if held["_scale"].item() != 3.0:
        raise ConformanceFailure(f"{_where('load_state_dict', device)}: the held scale tensor "
                                 f"reads {held['_scale'].item()} after loading 3.0")


def _same(scaler: torch.amp.GradScaler, held: dict[str, Any], device: str, what: str,
          before: float | None) -> None:
    now = _held(scaler)
    replaced = [name for name in STATE if now[name] is not held[name]]
    if replaced:
        raise ConformanceFailure(
            f"{_where('*', device, 'state identity')}: after {what} the scaler holds new "
            f"{', '.join(replaced)} tensor(s); a caller's reference to the old one (a captured "
            "graph, a fused optimizer's grad_scale) no longer sees the scale")
    if before is not None and held["_scale"].item() != scaler.get_scale():
        raise ConformanceFailure(f"{_where('*', device, 'state identity')}: after {what} the "
                                 f"held scale tensor reads {held['_scale'].item()}, get_scale() "
                                 f"{scaler.get_scale()}")


def check_setters(device: str) -> None:
    """set_growth_factor, set_backoff_factor and set_growth_interval are what the getters
    and state_dict() report and what the next update() applies."""
    scaler = torch.amp.GradScaler(device, init_scale=8.0, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=5)
    scaler.set_growth_factor(4.0)
    scaler.set_backoff_factor(0.25)
    scaler.set_growth_interval(1)
    where = _where("set_growth_factor/set_backoff_factor/set_growth_interval", device)
    got = (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval())
    state = scaler.state_dict()
    if got != (4.0, 0.25, 1) or (state["growth_factor"], state["backoff_factor"],
                                 state["growth_interval"]) != (4.0, 0.25, 1):
        raise ConformanceFailure(f"{where}: the getters give {got}, state_dict() {state}, "
                                 "expected (4.0, 0.25, 1)")
    p, opt, w = _setup(device)
    scales = []
    for plant in (None, math.inf):
        opt.zero_grad()
        _backward(scaler, p, w, plant)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    if scales != [32.0, 8.0]:
        raise ConformanceFailure(f"{where}: a finite then a non-finite step give the scales "
                                 f"{scales}, expected [32.0, 8.0] (growth 4 every step, "
                                 "back-off 0.25)")


class RecordingSGD(torch.optim.SGD):
    """An optimizer that unscales in its own step, as the fused ones do: it records the
    ``grad_scale`` and ``found_inf`` it is given and applies them itself."""

    _step_supports_amp_scaling = True

    def __init__(self, params: Any, lr: float = 0.5) -> None:
        super().__init__(params, lr=lr)
        self.seen: list[tuple[Any, Any]] = []

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        grad_scale = getattr(self, "grad_scale", "absent")
        found_inf = getattr(self, "found_inf", "absent")
        self.seen.append((_value(grad_scale), _value(found_inf)))
        if isinstance(found_inf, torch.Tensor) and found_inf.item():
            return None
        with torch.no_grad():
            for group in self.param_groups:
                for q in group["params"]:
                    if q.grad is not None:
                        if isinstance(grad_scale, torch.Tensor):
                            q.grad.div_(grad_scale.to(q.grad.dtype))
                        q.add_(q.grad, alpha=-group["lr"])
        return "stepped"


def _value(x: Any) -> Any:
    return x.item() if isinstance(x, torch.Tensor) else x


#: the optimizer-side protocol's cases: (grad_scale the user set, unscale_ first, plant)
PROTOCOL_CASES = {
    "scaler": (None, False, None),
    "user_grad_scale": (2.0, False, None),
    "after_unscale": (None, True, None),
    "inf": (None, False, math.inf),
}


def check_optimizer_protocol(device: str, case: str) -> None:
    """step() hands an optimizer that unscales itself the scale as ``grad_scale`` (times
    the one it set; None once unscale_ ran) and ``found_inf``, calls its step even on an
    inf (it decides), returns what it returns and removes both attributes after; the
    parameters move as the unscaled gradient says."""
    user, unscale_first, plant = PROTOCOL_CASES[case]
    where = _where("step", device, f"optimizer-side protocol, {case}")
    scaler = torch.amp.GradScaler(device, init_scale=4.0)
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0], device=device))
    w = torch.tensor(W, device=device)
    opt = RecordingSGD([p])
    if user is not None:
        opt.grad_scale = torch.tensor(user, device=device)
    before = p.detach().clone()
    _backward(scaler, p, w, plant)
    if unscale_first:
        scaler.unscale_(opt)
    result = scaler.step(opt)
    want_scale = None if unscale_first else 4.0 * (user or 1.0)
    want_inf = 0.0 if plant is None else 1.0
    if opt.seen != [(want_scale, want_inf)]:
        raise ConformanceFailure(f"{where}: the optimizer's step saw (grad_scale, found_inf) "
                                 f"{opt.seen}, expected [({want_scale}, {want_inf})]")
    left = [a for a in ("grad_scale", "found_inf") if hasattr(opt, a)]
    if left:
        raise ConformanceFailure(f"{where}: step() left {left} on the optimizer; they hold "
                                 "for that step only")
    want_result = None if plant is not None else "stepped"
    if result != want_result:
        raise ConformanceFailure(f"{where}: step() returned {result!r}, the optimizer's step "
                                 f"returned {want_result!r}")
    want = before if plant is not None else before - 0.5 * w / (user or 1.0)
    if not torch.equal(p.detach(), want):
        raise ConformanceFailure(f"{where}: parameters {p.detach()!r} after the step, "
                                 f"expected {want!r}")
    scaler.update()


#: the gradient dtypes of one optimizer's groups, in the order the scaler meets them
DTYPE_GROUPS = (torch.float32, torch.float64)


def check_dtype_groups(device: str, plant_in: int | None) -> None:
    """One optimizer whose param groups hold gradients of several dtypes: every gradient
    is unscaled in its dtype; an inf in any one group (``plant_in``) skips the whole step
    and backs the scale off."""
    scaler = torch.amp.GradScaler(device, init_scale=4.0, growth_interval=1)
    params = [torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=d, device=device))
              for d in DTYPE_GROUPS]
    opt = torch.optim.SGD([{"params": [q]} for q in params], lr=0.5)
    case = "finite" if plant_in is None else f"inf in the {DTYPE_GROUPS[plant_in]} group"
    where = _where("unscale_/step", device, f"dtype groups, {case}")
    before = [q.detach().clone() for q in params]
    loss = sum((q.float() * torch.tensor(W, device=device)).sum() for q in params)
    scaler.scale(loss).backward()
    if plant_in is not None:
        with torch.no_grad():
            params[plant_in].grad[1] = math.inf
    scaler.unscale_(opt)
    for q, d in zip(params, DTYPE_GROUPS, strict=True):
        if q.grad.dtype != d:
            raise ConformanceFailure(f"{where}: the {d} gradient became {q.grad.dtype}")
        if plant_in is None and not torch.equal(q.grad, torch.tensor(W, dtype=d, device=device)):
            raise ConformanceFailure(f"{where}: the {d} gradient unscaled to {q.grad!r}, "
                                     f"expected {W}")
    scaler.step(opt)
    scaler.update()
    moved = [not torch.equal(q.detach(), b) for q, b in zip(params, before, strict=True)]
    if plant_in is not None and (any(moved) or scaler.get_scale() != 2.0):
        raise ConformanceFailure(
            f"{where}: groups moved {moved} and the scale is {scaler.get_scale()}; an inf in "
            "one group must skip the step for every group and back the scale off to 2.0")
    if plant_in is None and (not all(moved) or scaler.get_scale() != 8.0):
        raise ConformanceFailure(f"{where}: groups moved {moved} and the scale is "
                                 f"{scaler.get_scale()}, expected all and 8.0")


def check_state_identity_meta(target: Target) -> str | None:
    """What needs no values, on fake tensors too: scale() gives the output's dtype and
    device, unscale_() keeps each gradient's dtype and shape (float32: what every device's
    unscale kernel takes), and update() (growing, and with
    a new scale) keeps the same scale and growth-tracker tensors. Returns why it does not
    apply (the scaler turned itself off without the device, shown by the scaler itself)."""
    device = target.device
    where = _where("scale/unscale_/update", device, "state identity, no values")
    with target.tensors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.amp.GradScaler(device, init_scale=4.0)
        if not scaler.is_enabled():
            said = "; ".join(str(w.message) for w in caught) or "no warning"
            mode = " in --fake mode" if target.fake else ""
            return (f"not applicable{mode}: torch.amp.GradScaler({device!r}) turned itself "
                    f"off here ({said})")
        params = [torch.nn.Parameter(torch.ones(n, device=device)) for n in (4, 3)]
        opt = torch.optim.SGD(params, lr=0.5)
        out = scaler.scale(torch.ones(2, device=device))
        if out.dtype != torch.float32 or out.device.type != device:
            raise ConformanceFailure(f"{where}: scale() of a float32 {device} tensor gave "
                                     f"{out.dtype} on {out.device}")
        held = _held(scaler)
        for what, new_scale in (("a growing update()", None), ("update(new_scale=100.0)", 100.0)):
            for q in params:
                q.grad = torch.full(q.shape, 8.0, device=device)
            scaler.unscale_(opt)
            bad = [f"{q.grad.dtype} {tuple(q.grad.shape)}" for q in params
                   if q.grad.dtype != q.dtype or q.grad.shape != q.shape]
            if bad:
                raise ConformanceFailure(f"{where}: unscale_() left gradients {bad}")
            scaler.update(new_scale)
            _same(scaler, held, device, what, None)
    return None
