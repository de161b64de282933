"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.Scaler`, through the
gradscaler family's training orders (``checks/gradscaler/training.py``).

- ``scales``: one step's backward receives the loss times the scale (``state_dict()``'s
  ``scale``), a new tensor in the loss's dtype on its device: not the loss itself (a
  scaler disabled on the device), not a float16 copy (which overflows at the default scale
  of 65536). Backward is intercepted, so this runs on a fake device too (dtypes and devices
  only there).
- ``skips``: the gradscaler family's ``step`` order against the unscaled control: the steps
  whose gradients hold an inf or a nan are skipped, the scale follows the update rule from
  the factors the scaler's ``state_dict()`` reports, every other step trains as the control.
- ``unscale``: the ``clip`` order (unscale_, clip_grad_norm_, step): the control clips the
  plain gradients, so a scaler that unscales twice, or clips scaled gradients, departs.
- ``state_dict``: a run resumed half-way in a fresh scaler that loaded the first one's
  ``state_dict()`` holds the same state and trains on as the uninterrupted run.

The last three need autograd and values: on a fake device they are not applicable.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import torch
import torch.nn.functional as TF

from amp_conformance.checks.gradscaler import training as T
from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.island import target
from amp_conformance.checks.wrappers.region import kept
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import grad_and_dtype_restored


class _Stop(Exception):
    """Raised at backward, once the tensor it was called on is seen."""


def _repro(case: WrapperCase, clip: float | None = None) -> list[str]:
    d = case.device
    return [f"model = torch.nn.Linear(8, 8).to({d!r}); opt = torch.optim.SGD("
            "model.parameters(), lr=0.1, momentum=0.9)", f"scaler = decl.make({d!r})",
            f"with torch.autocast({d!r}, dtype={case.amp_dtype}):",
            f"    loss = model(torch.randn(8, 8, device={d!r})).float().pow(2).mean()",
            f"decl.step(scaler, loss, opt, list(model.parameters()), {clip})",
            "print(scaler.state_dict())"]


def _backward_of(case: WrapperCase) -> tuple[torch.Tensor, Any, Any]:
    """(the loss, the tensor the scaler's step called backward on, the scaler)."""
    dev = case.device
    model = T.make_model(dev)
    if case.fake:  # no autograd history on fake tensors (it aborts without the device)
        model.requires_grad_(False)
    x, y = T.make_data(dev, steps=1)[0]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = case.wrapper.make(dev)
    with target(case).autocast(case.amp_dtype):
        loss = TF.mse_loss(model(x).float(), y)
    seen: list[torch.Tensor] = []

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> None:
        seen.append(tensors[0] if isinstance(tensors, (list, tuple)) else tensors)
        raise _Stop

    with mock.patch.object(torch.Tensor, "backward", backward), \
            mock.patch.object(torch.autograd, "backward", backward):
        try:
            case.wrapper.step(scaler, loss, opt, list(model.parameters()), None)
        except _Stop:
            pass
    if not seen:
        F.fail(case, F.SCALES, "its step never called backward", _repro(case))
    return loss, seen[0], scaler


def check_scales(case: WrapperCase) -> None:
    """Backward receives the loss times the scale: a new tensor, in the loss's dtype and on
    its device, equal to loss * state_dict()['scale'] where values exist."""
    problems = []
    with kept(case.device), grad_and_dtype_restored():
        loss, got, scaler = _backward_of(case)
        if got is loss:
            problems.append("backward received the loss itself, unscaled (is the scaler "
                            f"disabled on {case.device}?)")
        elif got.dtype != loss.dtype or got.device != loss.device:
            problems.append(f"backward received a {devices.dtype_name(got.dtype)} tensor on "
                            f"{got.device}; the loss is {devices.dtype_name(loss.dtype)} on "
                            f"{loss.device}")
        elif not case.fake:
            scale = scaler.state_dict().get("scale")
            want = None if scale is None else loss.detach() * scale
            if want is None or not torch.equal(got.detach(), want):
                problems.append(f"backward received {got.detach().item()!r}; the loss "
                                f"{loss.item()!r} times state_dict()['scale'] {scale!r} is "
                                f"{None if want is None else want.item()!r}")
    if problems:
        F.fail(case, F.SCALES, problems, _repro(case))


def _train(case: WrapperCase, clip: float | None = None, resume_at: int | None = None
           ) -> tuple[T.Trace, list[dict]]:
    with kept(case.device), grad_and_dtype_restored():
        torch.set_grad_enabled(True)
        return T.train_declared(target(case), case.amp_dtype, case.wrapper.make,
                                case.wrapper.step, clip=clip, resume_at=resume_at)


def _control(case: WrapperCase, order: str) -> T.Trace:
    with kept(case.device), grad_and_dtype_restored():
        torch.set_grad_enabled(True)
        return T.train(target(case), case.amp_dtype, T.OPTIMIZERS[0], "plain", order,
                       scaled=False)


def _held(case: WrapperCase, promise: str, scaled: T.Trace, states: list[dict],
          control: T.Trace, clip: float | None) -> None:
    """The scaled run against the control: planted steps skipped, the scale as the update
    rule gives it from the reported factors, parameters and optimizer state as the
    control's."""
    if not states[0]:
        F.fail(case, promise, f"its state_dict() is empty before the first step: the scaler "
               f"is disabled on {case.device}", _repro(case, clip))
    problems = []
    for i, (value, _) in T.PLANTS.items():
        if any(not torch.equal(a, b) for a, b in zip(scaled.params[i], scaled.params[i - 1],
                                                    strict=True)):
            problems.append(f"step {i} has {T._value_name(value)} in a gradient and must be "
                            "skipped, but the parameters changed")
    want = T.expected_from(states[0], [i in T.PLANTS for i in range(T.TRAIN_STEPS)])
    if scaled.scales != want:
        problems.append(f"scales {scaled.scales} after the steps, expected {want} (the update "
                        f"rule from its state_dict() {states[0]}, non-finite gradients at "
                        f"steps {sorted(T.PLANTS)})")
    try:
        names = T._names([T.make_model("cpu")])
        T.compare_runs("against the unscaled control", scaled, control, names)
        T.compare_states("against the unscaled control", scaled.optimizers[0],
                         control.optimizers[0])
    except ConformanceFailure as exc:
        problems.append(str(exc).splitlines()[0])
    if problems:
        F.fail(case, promise, problems, _repro(case, clip))


def check_skips(case: WrapperCase) -> None:
    """The ``step`` order: inf and nan steps skipped, the rest as the unscaled control."""
    scaled, states = _train(case)
    _held(case, F.SKIPS, scaled, states, _control(case, "step"), None)


def check_unscale(case: WrapperCase) -> None:
    """The ``clip`` order: gradients unscaled once before clipping, not again at step."""
    scaled, states = _train(case, clip=T.MAX_NORM)
    _held(case, F.UNSCALE_ONCE, scaled, states, _control(case, "clip"), T.MAX_NORM)


def check_state_dict(case: WrapperCase) -> None:
    """A fresh scaler loading the state_dict() after the inf step holds the same state
    and trains on exactly as the uninterrupted run."""
    at = max(T.PLANTS) - 1
    whole, _ = _train(case)
    resumed, states = _train(case, resume_at=at)
    problems = []
    with kept(case.device):
        fresh = case.wrapper.make(case.device)
        fresh.load_state_dict(dict(states[-1]))
        reloaded = dict(fresh.state_dict())
    if reloaded != states[-1]:
        problems.append(f"after load_state_dict({states[-1]}) a fresh scaler's state_dict() "
                        f"is {reloaded}")
    if resumed.scales != whole.scales:
        problems.append(f"resumed at step {at}: scales {resumed.scales}, the uninterrupted "
                        f"run's {whole.scales}")
    for step, (a, b) in enumerate(zip(resumed.params, whole.params, strict=True)):
        if any(not torch.equal(p, q) for p, q in zip(a, b, strict=True)):
            problems.append(f"resumed at step {at}: the parameters after step {step} differ "
                            "from the uninterrupted run's")
            break
    if problems:
        F.fail(case, F.ROUND_TRIP, problems, [
            f"scaler = decl.make({case.device!r})  # trained {at} steps",
            f"fresh = decl.make({case.device!r}); fresh.load_state_dict(scaler.state_dict())",
            "print(scaler.state_dict(), fresh.state_dict())"])
