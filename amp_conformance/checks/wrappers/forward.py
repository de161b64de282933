"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.ForwardDecorator`.

A forward decorated with the wrapper is called inside an enabled ``torch.autocast`` region
of the device, with floating tensors (positional and keyword, in a dtype other than the
declared ``cast_dtype``) beside integer ones: on a ``casts_on`` device every floating input
must arrive as ``cast_dtype`` and every other one untouched, elsewhere every input as it
was sent; autocast inside is what ``disables_autocast`` says; ``extra_kwargs`` are consumed;
with ``decorate_backward``, an autograd.Function's backward runs in the autocast state its
forward ran in, wherever ``backward()`` is called (as ``torch.amp.custom_bwd`` promises;
``checks/custom_fwd/check.py`` checks torch's own decorators the same way).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core import devices
from amp_conformance.core.errors import describe_error
from amp_conformance.core.state import grad_and_dtype_restored

_SEED = 21


def _region(case: WrapperCase) -> torch.autocast:
    return torch.autocast(case.device, dtype=case.amp_dtype)


def _region_line(case: WrapperCase, dtype: torch.dtype | None = None) -> str:
    return f"with torch.autocast({case.device!r}, dtype={dtype or case.amp_dtype}):"


def _sent_dtype(case: WrapperCase) -> torch.dtype:
    """Floating inputs are sent in a dtype the cast must change."""
    return torch.float32 if case.wrapper.cast_dtype != torch.float32 else case.amp_dtype


def _inputs(case: WrapperCase) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(_SEED)
    dt, dev = _sent_dtype(case), case.device
    args = (torch.randn(4, 4, generator=g).to(dev, dt), torch.randn(4, 4, generator=g).to(dev, dt),
            torch.arange(4, device=dev))
    kwargs = {"scale": torch.randn(4, generator=g).to(dev, dt),
              "index": torch.arange(3, device=dev)}
    return args, kwargs


def _call(case: WrapperCase, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Call the decorated forward inside an enabled region; what it received and saw."""
    got: dict[str, Any] = {}

    def forward(*a: Any, **k: Any) -> torch.Tensor:
        got.update(args=a, kwargs=k, state=(torch.is_autocast_enabled(case.device),
                                             torch.get_autocast_dtype(case.device)))
        return a[0] * 2

    decorated = case.wrapper.decorate(forward)
    with kept(case.device), _region(case):
        decorated(*args, **kwargs)
    return got


def _repro(case: WrapperCase, call: str = "f(a, b, i, scale=s, index=j)") -> list[str]:
    dt = _sent_dtype(case)
    return ["@decl.decorate", "def f(*args, **kwargs):",
            "    print([getattr(t, 'dtype', t) for t in (*args, *kwargs.values())], "
            f"torch.is_autocast_enabled({case.device!r}))", "    return args[0]",
            f"a, b, s = (torch.randn(4, 4, dtype={dt}) for _ in range(3))",
            "i, j = torch.arange(4), torch.arange(3)", _region_line(case), f"    {call}"]


def _received(case: WrapperCase, cast: bool) -> list[str]:
    args, kwargs = _inputs(case)
    got = _call(case, args, kwargs)
    if not got:
        return ["the decorated forward never called the function"]
    pairs = [(f"positional {i}", s, got["args"][i] if i < len(got["args"]) else None)
             for i, s in enumerate(args)]
    pairs += [(f"keyword {k!r}", s, got["kwargs"].get(k)) for k, s in kwargs.items()]
    problems = []
    for what, sent, arrived in pairs:
        if not isinstance(arrived, torch.Tensor):
            problems.append(f"{what} ({sent.dtype}) arrived as {type(arrived).__name__}")
            continue
        want = case.wrapper.cast_dtype if cast and sent.is_floating_point() else sent.dtype
        if arrived.dtype != want:
            problems.append(f"{what} sent as {devices.dtype_name(sent.dtype)} arrived as "
                            f"{devices.dtype_name(arrived.dtype)}, expected "
                            f"{devices.dtype_name(want)}")
    return problems


def check_casts(case: WrapperCase) -> None:
    """On a casts_on device every floating input (positional and keyword) arrives as
    cast_dtype inside an enabled region; integer tensors arrive untouched."""
    problems = _received(case, cast=True)
    if problems:
        F.fail(case, F.CASTS, problems, _repro(case))


def check_uncast(case: WrapperCase) -> None:
    """On a claimed device not in casts_on every input arrives as it was sent."""
    problems = _received(case, cast=False)
    if problems:
        F.fail(case, F.UNCAST, problems, _repro(case))


def check_inside(case: WrapperCase) -> None:
    """Autocast inside the forward: off where it casts and declares disables_autocast,
    otherwise the caller's region, untouched."""
    args, kwargs = _inputs(case)
    got = _call(case, args, kwargs)
    w = case.wrapper
    off = case.device in w.casts_on and w.disables_autocast
    want = (False, None) if off else (True, case.amp_dtype)
    seen = got.get("state")
    if seen is None or seen[0] != want[0] or (want[1] is not None and seen[1] != want[1]):
        shown = (f"enabled={seen[0]}, dtype={devices.dtype_name(seen[1])}" if seen
                 else "never called")
        F.fail(case, F.INSIDE, f"inside the decorated forward, called in an enabled "
               f"{devices.dtype_name(case.amp_dtype)} region: {shown}; expected enabled="
               f"{want[0]} (disables_autocast={w.disables_autocast}, casts_on={w.casts_on})",
               _repro(case))


def check_kwargs(case: WrapperCase) -> None:
    """The declared extra keywords are accepted and not passed on to the function."""
    args, kwargs = _inputs(case)
    extra = dict(case.wrapper.extra_kwargs)
    call = "f(a, b, i, " + ", ".join(f"{k}={v!r}" for k, v in extra.items()) + ")"
    try:
        got = _call(case, args, extra)
    except TypeError as exc:
        F.fail(case, F.KWARGS, f"the decorated forward refused {sorted(extra)}: "
               f"{describe_error(exc)}", _repro(case, call))
    leaked = sorted(set(extra) & set(got.get("kwargs", {})))
    if leaked:
        F.fail(case, F.KWARGS, f"{leaked} reached the function (they are the wrapper's own)",
               _repro(case, call))


def _function(case: WrapperCase, seen: dict[str, Any]) -> type[torch.autograd.Function]:
    dev, w = case.device, case.wrapper

    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        seen["forward"] = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        return x * 2

    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        seen["backward"] = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        return grad * 2

    return type("Decorated", (torch.autograd.Function,), {
        "forward": staticmethod(w.decorate(forward)),
        "backward": staticmethod(w.decorate_backward(backward))})


def check_backward(case: WrapperCase) -> None:
    """backward, called outside any region and inside a region of the other dtype, sees
    the (enabled, dtype) its forward ran with (on a fake device, host tensors carry the
    graph: ``fake_device.on_host``)."""
    dev, other = case.device, other_dtype(case.amp_dtype)
    for where in ("outside any region", f"inside torch.autocast(dtype={other})"):
        seen: dict[str, Any] = {}
        fn = _function(case, seen)
        with kept(dev), grad_and_dtype_restored():
            torch.set_grad_enabled(True)
            x = torch.ones(2, device="cpu" if case.fake else dev, requires_grad=True)
            with _region(case):
                y = fn.apply(x)
            outer = (contextlib.nullcontext() if where == "outside any region"
                     else torch.autocast(dev, dtype=other))
            try:
                with outer:
                    y.float().sum().backward()
            except Exception as exc:  # noqa: BLE001 - the decorated backward may raise anything
                seen["backward"] = exc
        if seen.get("backward") != seen.get("forward"):
            show = {k: describe_error(v) if isinstance(v, Exception) else
                    (v[0], devices.dtype_name(v[1])) for k, v in seen.items()}
            F.fail(case, F.BACKWARD, f"forward ran with (enabled, dtype) = {show.get('forward')}"
                   f", backward called {where} ran with {show.get('backward')}", [
                       "class Fn(torch.autograd.Function):",
                       "    forward = staticmethod(decl.decorate(lambda ctx, x: x * 2))",
                       "    backward = staticmethod(decl.decorate_backward(lambda ctx, g: "
                       f"print(torch.is_autocast_enabled({dev!r}), torch.get_autocast_dtype("
                       f"{dev!r})) or g * 2))", "x = torch.ones(2, requires_grad=True)",
                       f"{_region_line(case)}", "    y = Fn.apply(x)",
                       *(["y.float().sum().backward()"] if where == "outside any region" else
                         [_region_line(case, other), "    y.float().sum().backward()"])])
