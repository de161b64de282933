"""The contract of ``torch.amp.GradScaler(device)``: what a training loop relies on.

``scale()`` of tensors and nested outputs, lazy creation of the scale, ``unscale_()``
at most once per step, ``step()`` skipping the optimizer on non-finite gradients,
``update()`` with and without ``new_scale``, ``enabled=False`` as a pass-through, and
state that survives ``state_dict()``/``load_state_dict()`` and pickling so that a resumed
run continues exactly. Every check drives the scaler through its public methods on a
one-parameter model whose gradients are known exactly.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.gradscaler.kernels import model_update
from amp_conformance.core.errors import ConformanceFailure

#: the loss is (p * W).sum(), so a scaled gradient is exactly scale * W
W = (1.0, -2.0, 3.0, 0.5)
SENTINEL = "optimizer.step() ran"


class CountingSGD(torch.optim.SGD):
    """SGD that counts its steps and returns a sentinel, so a skipped step shows."""

    def __init__(self, params: Any, lr: float = 0.5) -> None:
        super().__init__(params, lr=lr)
        self.calls = 0

    def step(self, closure: Callable | None = None) -> Any:  # type: ignore[override]
        self.calls += 1
        super().step(closure)
        return SENTINEL


def _where(method: str, device: str, case: str = "") -> str:
    return f"GradScaler.{method} on {device}" + (f", case {case!r}" if case else "")


def _setup(device: str, dtype: torch.dtype = torch.float32
           ) -> tuple[torch.nn.Parameter, CountingSGD, torch.Tensor]:
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=dtype, device=device))
    return p, CountingSGD([p]), torch.tensor(W, dtype=dtype, device=device)


def _backward(scaler: torch.amp.GradScaler, p: torch.Tensor, w: torch.Tensor,
              plant: float | None = None) -> None:
    scaler.scale((p * w).sum()).backward()
    if plant is not None:
        with torch.no_grad():
            p.grad[1] = plant


def _raises(call: Callable[[], Any], kinds: tuple[type[BaseException], ...]) -> bool:
    try:
        call()
    except kinds:
        return True
    return False


def drive(scaler: torch.amp.GradScaler, device: str, flags: list[float]
          ) -> list[tuple[float, int]]:
    """One scaled step per flag (0: finite gradients, else that value planted in them);
    the (scale, growth tracker) after each update, read through the public API."""
    p, opt, w = _setup(device)
    trace = []
    for flag in flags:
        opt.zero_grad()
        _backward(scaler, p, w, flag or None)
        scaler.step(opt)
        scaler.update()
        trace.append((scaler.get_scale(), int(scaler.state_dict()["_growth_tracker"])))
    return trace


# -- scale() -----------------------------------------------------------------------------


def check_scale_outputs(device: str) -> None:
    """scale() multiplies a tensor, or every tensor of nested lists and tuples (keeping
    their types), by the scale, and refuses what is not a tensor or an iterable of them."""
    scaler = torch.amp.GradScaler(device, init_scale=8.0)
    where = _where("scale", device)
    t = torch.tensor([1.0, 2.0, 3.0], device=device)
    h = torch.tensor([1.5, -2.0], dtype=torch.float16, device=device)
    factor = torch.tensor(8.0, device=device)
    for x in (t, h):
        out = scaler.scale(x)
        want = x * factor
        if out.dtype != want.dtype or out.device != x.device or not torch.equal(out, want):
            raise ConformanceFailure(f"{where}: scale({x.dtype} tensor) gave {out!r}, "
                                     f"expected {want!r}")
    nested = [t, (h, [t]), ()]
    out = scaler.scale(nested)
    shape = (type(out), type(out[1]), type(out[1][1]), type(out[2]))
    if shape != (list, tuple, list, tuple):
        raise ConformanceFailure(f"{where}: scale([t, (h, [t]), ()]) changed the containers "
                                 f"to {[c.__name__ for c in shape]}")
    for got, x in ((out[0], t), (out[1][0], h), (out[1][1][0], t)):
        if not torch.equal(got, x * factor):
            raise ConformanceFailure(f"{where}: a nested output was scaled to {got!r}, "
                                     f"expected {x * factor!r}")
    lazy = list(scaler.scale(x for x in (t, t)))
    if len(lazy) != 2 or not all(torch.equal(o, t * factor) for o in lazy):
        raise ConformanceFailure(f"{where}: scale(a generator of tensors) gave {lazy!r}")
    if not _raises(lambda: scaler.scale([t, 3.0]), (ValueError,)):
        raise ConformanceFailure(f"{where}: scale([tensor, 3.0]) did not raise ValueError")


def check_lazy_init(device: str) -> None:
    """Before the first scale() the scaler holds no tensor yet but reports its initial
    scale; update() without a scale() refuses; the first scale() makes the scale a
    float32 tensor on the device of the scaled output."""
    scaler = torch.amp.GradScaler(device, init_scale=1024.0)
    where = _where("scale", device, "lazy initialisation")
    if scaler.get_scale() != 1024.0 or scaler.state_dict()["scale"] != 1024.0:
        raise ConformanceFailure(f"{where}: before the first scale(), get_scale() is "
                                 f"{scaler.get_scale()}, expected the init_scale 1024.0")
    if getattr(scaler, "_scale", None) is not None:
        raise ConformanceFailure(f"{where}: the scale tensor exists before the first scale()")
    if not _raises(scaler.update, (AssertionError, RuntimeError)):
        raise ConformanceFailure(f"{_where('update', device)}: update() before any scale() "
                                 "did not raise")
    scaler.scale(torch.ones(2, device=device))
    scale = getattr(scaler, "_scale", None)
    if scale is None or scale.dtype != torch.float32 or scale.device.type != device:
        raise ConformanceFailure(f"{where}: after scale() of a {device} tensor the scale is "
                                 f"{scale!r}, expected a float32 tensor on {device}")
    if scaler.get_scale() != 1024.0:
        raise ConformanceFailure(f"{where}: scale() changed the scale to {scaler.get_scale()}")


# -- unscale_() and step() ---------------------------------------------------------------


def check_unscale_once(device: str) -> None:
    """unscale_() twice before step() raises (it would unscale twice), as do unscale_()
    after step() and step() twice; after update() a new iteration may unscale again."""
    scaler = torch.amp.GradScaler(device, init_scale=4.0)
    p, opt, w = _setup(device)
    _backward(scaler, p, w)
    scaler.unscale_(opt)
    unscaled = p.grad.clone()
    if not _raises(lambda: scaler.unscale_(opt), (RuntimeError,)):
        raise ConformanceFailure(f"{_where('unscale_', device)}: calling unscale_() twice "
                                 "before step() did not raise RuntimeError")
    if not torch.equal(p.grad, unscaled):
        raise ConformanceFailure(f"{_where('unscale_', device)}: the refused second "
                                 "unscale_() call still changed the gradients")
    scaler.step(opt)
    if not _raises(lambda: scaler.unscale_(opt), (RuntimeError,)):
        raise ConformanceFailure(f"{_where('unscale_', device)}: unscale_() after step() "
                                 "did not raise RuntimeError")
    if not _raises(lambda: scaler.step(opt), (RuntimeError,)):
        raise ConformanceFailure(f"{_where('step', device)}: step() twice before update() "
                                 "did not raise RuntimeError")
    scaler.update()
    opt.zero_grad()
    _backward(scaler, p, w)
    scaler.unscale_(opt)  # a new iteration: allowed again


def check_step(device: str, plant: float | None) -> None:
    """step() unscales and steps with finite gradients (returning what optimizer.step()
    returns); with an inf, -inf or nan gradient it skips optimizer.step(), leaves the
    parameters alone and returns None; update() then grows or backs off the scale."""
    case = "finite" if plant is None else str(plant)
    scaler = torch.amp.GradScaler(device, init_scale=4.0, growth_interval=1)
    p, opt, w = _setup(device)
    before = p.detach().clone()
    _backward(scaler, p, w, plant)
    result = scaler.step(opt)
    where = _where("step", device, case)
    if plant is None:
        want = before - 0.5 * w
        if opt.calls != 1 or result != SENTINEL:
            raise ConformanceFailure(f"{where}: with finite gradients optimizer.step() ran "
                                     f"{opt.calls} times and step() returned {result!r}, "
                                     f"expected 1 and optimizer.step()'s {SENTINEL!r}")
        if not torch.equal(p.detach(), want):
            raise ConformanceFailure(f"{where}: parameters {p.detach()!r} after the step, "
                                     f"expected {want!r} (gradients unscaled by 1/4)")
    else:
        if opt.calls:
            raise ConformanceFailure(f"{where}: optimizer.step() ran although a gradient "
                                     f"holds {case}; a step with non-finite gradients must be "
                                     "skipped")
        if result is not None or not torch.equal(p.detach(), before):
            raise ConformanceFailure(f"{where}: a skipped step returned {result!r} and left "
                                     f"parameters {p.detach()!r}, expected None and {before!r}")
    scaler.update()
    want_scale = 8.0 if plant is None else 2.0
    if scaler.get_scale() != want_scale:
        raise ConformanceFailure(f"{_where('update', device, case)}: scale {scaler.get_scale()}"
                                 f" after the step, expected {want_scale}")


def check_refuses_fp16_grads(device: str) -> None:
    """unscale_() of float16 gradients raises ValueError rather than unscaling in float16
    (GradScaler is meant for float32 master parameters)."""
    scaler = torch.amp.GradScaler(device)
    p, opt, w = _setup(device, torch.float16)
    _backward(scaler, p, w)
    if not _raises(lambda: scaler.unscale_(opt), (ValueError,)):
        raise ConformanceFailure(f"{_where('unscale_', device)}: unscale_() of float16 "
                                 "gradients did not raise ValueError")


# -- update() ------------------------------------------------------------------------------


#: steps of the update and resume checks (0: finite); a run resumed after step 3 restores
#: a growth tracker of 1 that the finite steps 4 and 5 need to grow the scale on time
FLAGS = [0.0, 0.0, math.inf, 0.0, 0.0, 0.0, math.nan, 0.0, -math.inf, 0.0]


def check_update_follows_model(device: str) -> None:
    """update() without new_scale, over steps with finite and non-finite gradients,
    follows the update rule (``kernels.model_update``) after every step."""
    scaler = torch.amp.GradScaler(device, init_scale=16.0, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=2)
    scale, tracker = 16.0, 0
    for k, (flag, got) in enumerate(zip(FLAGS, drive(scaler, device, FLAGS), strict=True)):
        step = model_update(scale, tracker, float(flag != 0), 2.0, 0.5, 2)
        if got != (step.scale, step.tracker):
            raise ConformanceFailure(
                f"{_where('update', device)}: after step {k} (gradients {flag or 'finite'}, "
                f"a {step.event}) scale and growth tracker are {got}, expected "
                f"{(step.scale, step.tracker)}")
        scale, tracker = step.scale, step.tracker


def check_update_new_scale(device: str) -> None:
    """update(new_scale) sets the scale from a float or a one-element tensor (copied, not
    aliased) and leaves the growth tracker; a tensor with grad or several elements is
    refused."""
    scaler = torch.amp.GradScaler(device, init_scale=4.0, growth_interval=3)
    where = _where("update", device, "new_scale")
    p, opt, w = _setup(device)
    for new, want in ((100.0, 100.0), (torch.tensor(50.0, device=device), 50.0)):
        opt.zero_grad()
        _backward(scaler, p, w)
        scaler.step(opt)
        scaler.update(new_scale=new)
        if isinstance(new, torch.Tensor):
            new.fill_(7.0)
        if scaler.get_scale() != want:
            raise ConformanceFailure(f"{where}: scale {scaler.get_scale()} after "
                                     f"update(new_scale={new!r}), expected {want}")
    if scaler.state_dict()["_growth_tracker"] != 0:
        raise ConformanceFailure(f"{where}: update(new_scale) moved the growth tracker to "
                                 f"{scaler.state_dict()['_growth_tracker']}")
    for bad in (torch.tensor(5.0, device=device, requires_grad=True),
                torch.tensor([5.0, 6.0], device=device)):
        opt.zero_grad()
        _backward(scaler, p, w)
        scaler.step(opt)
        if not _raises(lambda b=bad: scaler.update(new_scale=b), (AssertionError, ValueError,
                                                                  RuntimeError)):
            raise ConformanceFailure(f"{where}: update(new_scale={bad!r}) was accepted")
        scaler.update(new_scale=50.0)


def check_disabled(device: str) -> None:
    """enabled=False is a transparent pass-through: outputs come back as they are,
    gradients are not touched, every step runs (even with an inf), the scale reads 1.0
    and the state is empty."""
    scaler = torch.amp.GradScaler(device, enabled=False)
    where = _where("*", device, "enabled=False")
    t = torch.ones(3, device=device)
    nested = [t, (t,)]
    if scaler.scale(t) is not t or scaler.scale(nested) is not nested:
        raise ConformanceFailure(f"{where}: scale() did not return its argument itself")
    p, opt, w = _setup(device)
    (p * w).sum().backward()
    with torch.no_grad():
        p.grad[1] = math.inf
    grad = p.grad.clone()
    scaler.unscale_(opt)
    if not torch.equal(p.grad, grad):
        raise ConformanceFailure(f"{where}: unscale_() changed the gradients")
    result = scaler.step(opt)
    scaler.update()
    scaler.update(new_scale=5.0)
    if opt.calls != 1 or result != SENTINEL:
        raise ConformanceFailure(f"{where}: step() ran optimizer.step() {opt.calls} times and "
                                 f"returned {result!r}; disabled, it must always step")
    if scaler.is_enabled() or scaler.get_scale() != 1.0 or scaler.state_dict() != {}:
        raise ConformanceFailure(f"{where}: is_enabled() {scaler.is_enabled()}, get_scale() "
                                 f"{scaler.get_scale()}, state_dict() {scaler.state_dict()}; "
                                 "expected False, 1.0, {}")
    scaler.load_state_dict({"scale": 3.0})  # a no-op when disabled


# -- state_dict, pickling and resuming ------------------------------------------------------


def _factors(scaler: torch.amp.GradScaler) -> tuple:
    return (scaler.get_scale(), scaler.get_growth_factor(), scaler.get_backoff_factor(),
            scaler.get_growth_interval(), int(scaler.state_dict()["_growth_tracker"]))


def check_state_dict(device: str, initialised: bool) -> None:
    """load_state_dict() of another scaler's state_dict() takes its scale, factors,
    interval and growth tracker, whether or not the loading scaler made its scale tensor
    yet; the restored tracker then decides the next growth."""
    case = "initialised" if initialised else "lazy"
    where = _where("load_state_dict", device, case)
    source = torch.amp.GradScaler(device, init_scale=3.0, growth_factor=4.0,
                                  backoff_factor=0.5, growth_interval=2)
    drive(source, device, [0.0])  # tracker 1: one more finite step grows the scale
    target = torch.amp.GradScaler(device, init_scale=6.0, growth_factor=7.0,
                                  backoff_factor=0.8, growth_interval=1)
    if initialised:
        target.scale(torch.full((1,), 4.0, device=device))
    target.load_state_dict(source.state_dict())
    names = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
    for name, got, want in zip(names, _factors(target), (3.0, 4.0, 0.5, 2, 1), strict=True):
        if got != want:
            raise ConformanceFailure(f"{where}: {name} is {got} after loading, expected {want}")
    if drive(target, device, [0.0]) != [(12.0, 0)]:
        raise ConformanceFailure(f"{where}: the step after loading did not grow the scale from "
                                 "3.0 to 12.0 with the restored _growth_tracker")


def check_pickle(device: str, initialised: bool) -> None:
    """A pickled scaler (before its first scale(), or between iterations) unpickles with
    the same scale, factors, interval and growth tracker, and steps on like the original."""
    case = "initialised" if initialised else "lazy"
    where = _where("__getstate__/__setstate__ (pickle)", device, case)
    a = torch.amp.GradScaler(device, init_scale=3.0, growth_factor=4.0, backoff_factor=0.5,
                             growth_interval=2)
    if initialised:
        drive(a, device, [0.0])
    b = pickle.loads(pickle.dumps(a))
    if b.is_enabled() != a.is_enabled() or _factors(b) != _factors(a):
        raise ConformanceFailure(f"{where}: unpickled state {_factors(b)}, original "
                                 f"{_factors(a)} (scale, factors, interval, tracker)")
    if drive(a, device, [0.0, math.inf]) != drive(b, device, [0.0, math.inf]):
        raise ConformanceFailure(f"{where}: the unpickled scaler steps differently")


def check_resume(device: str, how: str) -> None:
    """A run checkpointed mid-way (state_dict or pickle) and resumed in a fresh scaler
    continues exactly as the uninterrupted run: same scales and growth trackers."""
    def fresh() -> torch.amp.GradScaler:
        return torch.amp.GradScaler(device, init_scale=16.0, growth_interval=3)

    whole = drive(fresh(), device, FLAGS)
    first = fresh()
    drive(first, device, FLAGS[:4])
    if how == "state_dict":
        resumed = fresh()
        resumed.load_state_dict(first.state_dict())
    else:
        resumed = pickle.loads(pickle.dumps(first))
    rest = drive(resumed, device, FLAGS[4:])
    if rest != whole[4:]:
        method = "load_state_dict" if how == "state_dict" else "__setstate__ (pickle)"
        raise ConformanceFailure(
            f"{_where(method, device, how)}: a run resumed after step 3 gives (scale, "
            f"_growth_tracker) {rest}, the uninterrupted run {whole[4:]}")
