"""The rest of ``torch.amp.custom_fwd``'s contract, held against a ForwardDecorator.

torch/amp/autocast_mode.py: ``custom_fwd`` is a no-op outside an enabled region (a disabled
one included): the forward gets the very objects it was sent. Inside one it casts with
``_cast``: a tensor only when it is floating, not float64 and on the device; tensors inside
lists, tuples and dicts too (a list stays a list, a tuple a tuple); strings, numbers, None,
numpy arrays and other objects pass as they are. The caller's autocast state is back after
the forward returns and after it raises (the exception propagating), and autograd runs
through the cast: gradients reach the caller's tensors, in their own dtype. The first
positional argument stands for ``ctx`` or ``self`` (custom_fwd sets attributes on it).
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.region import kept
from amp_conformance.core import devices
from amp_conformance.core.errors import describe_error
from amp_conformance.core.state import AutocastState, grad_and_dtype_restored

_SEED = 22


class Owner:
    """The forward's first argument (``ctx`` of an autograd.Function, ``self`` of a module)."""


class _Raised(Exception):
    """Raised by the forward in the ``after`` check."""


def _sent(case: WrapperCase) -> torch.dtype:
    return torch.float32 if case.wrapper.cast_dtype != torch.float32 else case.amp_dtype


def _casts(case: WrapperCase) -> bool:
    return case.device in case.wrapper.casts_on


def _inputs(case: WrapperCase, grad: bool = False) -> tuple[tuple, dict]:
    """A floating tensor at the top, inside a list, a tuple and a dict (positional and
    keyword), beside float64, integer and bool tensors and non-tensor arguments."""
    g, dev, dt = torch.Generator().manual_seed(_SEED), case.device, _sent(case)

    def fl() -> torch.Tensor:
        return torch.randn(3, 3, generator=g).to(dev, dt).requires_grad_(grad)
    args = (Owner(), fl(), [fl(), {"inner": fl()}], (torch.randn(3, dtype=torch.float64,
            generator=g).to(dev), torch.arange(3, device=dev)), "text", 3, 2.5, None,
            np.ones(2, dtype=np.float32))
    kwargs = {"nested": {"x": [fl()], "y": (fl(),)}, "mask": torch.ones(3, dtype=torch.bool,
              device=dev), "scale": 0.5}
    return args, kwargs


def _decorated(case: WrapperCase, got: dict[str, Any], body=None):
    dev = case.device

    def forward(*a: Any, **k: Any) -> Any:
        got.update(args=a, kwargs=k, state=(torch.is_autocast_enabled(dev),
                                             torch.get_autocast_dtype(dev)))
        return body(*a, **k) if body else a[1] * 2
    return case.wrapper.decorate(forward)


def _show(dtype: torch.dtype) -> str:
    return devices.dtype_name(dtype)


def _compare(sent: Any, arrived: Any, cast: torch.dtype | None, path: str,
             device: str, out: list[tuple[str, str]]) -> None:
    """(promise, problem) for every input that did not arrive as the contract says."""
    if isinstance(sent, torch.Tensor):
        eligible = (sent.is_floating_point() and sent.dtype != torch.float64
                    and sent.device.type == device)
        want = cast if cast is not None and eligible else sent.dtype
        if not isinstance(arrived, torch.Tensor):
            out.append((F.CONTAINERS, f"{path} ({_show(sent.dtype)}) arrived as "
                        f"{type(arrived).__name__}"))
        elif arrived.dtype != want:
            promise = F.CONTAINERS if want != sent.dtype else F.UNTOUCHED
            out.append((promise, f"{path} sent as {_show(sent.dtype)} arrived as "
                        f"{_show(arrived.dtype)}, expected {_show(want)}"))
    elif isinstance(sent, (list, tuple, dict)) and type(arrived) is not type(sent):
        out.append((F.CONTAINERS, f"{path}, a {type(sent).__name__}, arrived as "
                    f"{type(arrived).__name__}"))
    elif isinstance(sent, dict):
        for k, v in sent.items():
            _compare(v, arrived.get(k), cast, f"{path}[{k!r}]", device, out)
    elif isinstance(sent, (list, tuple)):
        if len(arrived) != len(sent):
            out.append((F.CONTAINERS, f"{path} of {len(sent)} arrived with {len(arrived)}"))
        for i, (v, w) in enumerate(zip(sent, arrived, strict=False)):
            _compare(v, w, cast, f"{path}[{i}]", device, out)
    elif arrived is not sent:
        out.append((F.UNTOUCHED, f"{path} ({type(sent).__name__} {sent!r}) arrived as "
                    f"another object: {arrived!r}"))


def _problems(case: WrapperCase, got: dict, args: tuple, kwargs: dict,
              cast: torch.dtype | None) -> list[tuple[str, str]]:
    if not got:
        return [(F.CONTAINERS, "the decorated forward never called the function")]
    out: list[tuple[str, str]] = []
    for i, sent in enumerate(args):
        arrived = got["args"][i] if i < len(got["args"]) else None
        _compare(sent, arrived, cast, f"positional {i}", case.device, out)
    for k, sent in kwargs.items():
        _compare(sent, got["kwargs"].get(k), cast, f"keyword {k!r}", case.device, out)
    return out


def _repro(case: WrapperCase, region: str) -> list[str]:
    dt = _sent(case)
    return ["import numpy as np", "@decl.decorate", "def f(*args, **kwargs):",
            "    print(args[1:], kwargs, torch.is_autocast_enabled("
            f"{case.device!r}))", "    return args[1]",
            f"t = lambda: torch.randn(3, 3, dtype={dt})", "class Owner: pass", region,
            "    f(Owner(), t(), [t(), {'inner': t()}], (torch.randn(3, dtype=torch.float64), "
            "torch.arange(3)), 'text', 3, 2.5, None, np.ones(2, dtype=np.float32), "
            "nested={'x': [t()], 'y': (t(),)}, mask=torch.ones(3, dtype=torch.bool), "
            "scale=0.5)"]


def _enabled_line(case: WrapperCase) -> str:
    return f"with torch.autocast({case.device!r}, dtype={case.amp_dtype}):"


def check_outside(case: WrapperCase) -> None:
    """Outside any region and in a disabled one the decorator is a no-op: every input
    arrives as sent, autocast inside is the caller's (off), the state after is unchanged."""
    dev = case.device
    for where, region, line in (
            ("outside any region", contextlib.nullcontext, "if True:"),
            ("inside torch.autocast(enabled=False)",
             lambda: torch.autocast(dev, dtype=case.amp_dtype, enabled=False),
             f"with torch.autocast({dev!r}, dtype={case.amp_dtype}, enabled=False):")):
        args, kwargs, got = *_inputs(case), {}
        with kept(dev), region():
            before = AutocastState.capture(dev)
            _decorated(case, got)(*args, **kwargs)
            changes = before.diff(AutocastState.capture(dev))
        problems = [p for _, p in _problems(case, got, args, kwargs, None)]
        if got and got["state"][0]:
            problems.append(f"autocast enabled inside the forward (dtype "
                            f"{_show(got['state'][1])}), called {where}")
        problems += [f"after the call: {c}" for c in changes]
        if problems:
            F.fail(case, F.OUTSIDE, [f"called {where}:", *problems], _repro(case, line))


def check_eligible(case: WrapperCase) -> None:
    """In an enabled region: tensors inside lists, tuples and dicts are cast like top-level
    ones (containers keep their type); float64, integer, bool tensors and every non-tensor
    argument pass untouched (on a device it does not cast on, everything does)."""
    args, kwargs, got = *_inputs(case), {}
    with kept(case.device), torch.autocast(case.device, dtype=case.amp_dtype):
        _decorated(case, got)(*args, **kwargs)
    cast = case.wrapper.cast_dtype if _casts(case) else None
    found = _problems(case, got, args, kwargs, cast)
    if found:
        promise = found[0][0]
        F.fail(case, promise, [p for _, p in found], _repro(case, _enabled_line(case)))


def check_after(case: WrapperCase) -> None:
    """The caller's whole autocast state is back after the forward returns and after it
    raises, and the forward's exception reaches the caller."""
    dev = case.device

    def boom(*a: Any, **k: Any) -> Any:
        raise _Raised("raised inside the decorated forward")
    for how, body in (("returned", None), ("raised", boom)):
        args, kwargs, got = *_inputs(case), {}
        escaped, changes = None, []
        with kept(dev), torch.autocast(dev, dtype=case.amp_dtype):
            before = AutocastState.capture(dev)
            try:
                _decorated(case, got, body)(*args, **kwargs)
            except _Raised as exc:
                escaped = exc
            changes = before.diff(AutocastState.capture(dev))
        repro = ["@decl.decorate", "def f(x):", f"    {'raise RuntimeError' if body else 'pass'}",
                 _enabled_line(case), "    try:", f"        f(torch.randn(3, dtype={_sent(case)}))",
                 "    except RuntimeError:", "        pass",
                 f"    print(torch.is_autocast_enabled({dev!r}), "
                 f"torch.get_autocast_dtype({dev!r}))"]
        if body and escaped is None:
            F.fail(case, F.AFTER, "the forward's exception did not reach the caller", repro)
        if changes:
            F.fail(case, F.AFTER, [f"after the forward {how}: {c}" for c in changes], repro)


def check_grad(case: WrapperCase) -> None:
    """Autograd runs through the cast: called in an enabled region, backward outside it,
    every floating input that requires grad gets its gradient, in its own dtype, equal to
    the gradient through a hand cast."""
    dev, cast = case.device, case.wrapper.cast_dtype if _casts(case) else None
    args, kwargs = _inputs(case, grad=True)
    a, b = args[1], args[2][0]

    def body(owner, a2, bs, *rest, nested, **k):
        return (a2 * bs[0]).sum() + bs[1]["inner"].sum() * 2 + (nested["y"][0] * 3).sum()
    leaves = {"positional 1": (a, b), "positional 2[0]": (b, a),
              "positional 2[1]['inner']": (args[2][1]["inner"], 2),
              "keyword 'nested'['y'][0]": (kwargs["nested"]["y"][0], 3)}
    problems = []
    with kept(dev), grad_and_dtype_restored():
        torch.set_grad_enabled(True)
        with torch.autocast(dev, dtype=case.amp_dtype):
            out = _decorated(case, {}, body)(*args, **kwargs)
        try:
            out.float().backward()
        except RuntimeError as exc:
            problems.append(f"backward through the decorated forward raised "
                            f"{describe_error(exc)}")
    for what, (leaf, partner) in ([] if problems else leaves.items()):
        problems += _grad_problem(what, leaf, partner, cast)
    if problems:
        F.fail(case, F.GRAD, problems, [
            "@decl.decorate", "def f(owner, a, b):", "    return (a * b).sum()",
            f"a, b = (torch.randn(3, 3, dtype={_sent(case)}, requires_grad=True) "
            "for _ in range(2))", "class Owner: pass", _enabled_line(case),
            "    out = f(Owner(), a, b)", "out.float().backward()",
            "print(a.grad, b.grad)  # b and a, through the cast, in their own dtype"])


def _grad_problem(what: str, leaf: torch.Tensor, partner: Any,
                  cast: torch.dtype | None) -> list[str]:
    if leaf.grad is None:
        return [f"{what} ({_show(leaf.dtype)}, requires grad) got no gradient: the cast "
                "cut it from the graph"]
    if leaf.grad.dtype != leaf.dtype:
        return [f"{what}: gradient in {_show(leaf.grad.dtype)}, expected its own dtype "
                f"{_show(leaf.dtype)}"]
    if isinstance(partner, torch.Tensor):
        want = partner.detach().to(cast or partner.dtype).to(leaf.dtype)
    else:
        want = torch.full_like(leaf, partner)
    if not torch.equal(leaf.grad, want):
        return [f"{what}: gradient differs from the one through a hand cast (max abs "
                f"difference {(leaf.grad.float() - want.float()).abs().max().item():.3g})"]
    return []
