"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.RegionRunner`.

A runner hands out no region: it calls the user's code (``body``) inside one it enters
itself. So the checks are made through the body: it sees the declared state on the device
(``state``), alone and inside an outer region of the other dtype or a disabled one, whose
state comes back after (``nesting``); the caller's whole autocast state is back after the
runner returns and after the body raises, the exception reaching the caller (``restored``).

On a fake device the body ends the step once it has looked (:func:`step`): the rest of a
training step (backward, the optimizer's step) needs autograd and values, which a fake device
has not. There the state after a returning step is checked only where the step can return
(an evaluator's); after a raising body it always is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core import devices
from amp_conformance.core.errors import NotApplicable
from amp_conformance.core.state import AutocastState


class _Raised(Exception):
    """Raised by the body, to see what the runner restores after it."""


class _Stopped(Exception):
    """Raised by the body on a fake device once it has looked: the step ends there."""


def step(case: WrapperCase, body: Callable[[], Any]) -> None:
    """One step of the runner around ``body``; on a fake device the body then ends it."""
    if not case.fake:
        case.wrapper.runs(body, case.precision, case.device)
        return

    def stops() -> Any:
        body()
        raise _Stopped
    try:
        case.wrapper.runs(stops, case.precision, case.device)
    except _Stopped:
        pass


def _inside(case: WrapperCase) -> tuple[bool, torch.dtype]:
    """The device's (enabled, dtype) the body saw."""
    seen: list[tuple[bool, torch.dtype]] = []
    dev = case.device
    step(case, lambda: seen.append((torch.is_autocast_enabled(dev),
                                    torch.get_autocast_dtype(dev))))
    if not seen:
        F.fail(case, F.RUNS_STATE, "the body was never called", _lines(case))
    return seen[-1]


def _lines(case: WrapperCase, *before: str) -> list[str]:
    d = case.device
    indent = "    " if before else ""
    return [*before, f"{indent}decl.runs(lambda: print(torch.is_autocast_enabled({d!r}), "
                     f"torch.get_autocast_dtype({d!r})), {case.precision!r}, {d!r})"]


def _problem(case: WrapperCase, seen: tuple[bool, torch.dtype], where: str,
             ambient: torch.dtype | None = None) -> str | None:
    """What is wrong with the state the body saw (``ambient``: the dtype set around the
    runner, which a precision declared ``ambient_dtype`` takes)."""
    want = ambient if ambient is not None and case.precision in case.wrapper.ambient_dtype \
        else case.amp_dtype
    if seen == (True, want):
        return None
    return (f"{where}: the body ran with enabled={seen[0]}, dtype={devices.dtype_name(seen[1])}; "
            f"expected enabled=True, dtype={devices.dtype_name(want)}"
            + (" (declared ambient_dtype: the dtype set around it)" if want != case.amp_dtype
               else ""))


def check_state(case: WrapperCase) -> None:
    """The body runs with the device's autocast on in the declared dtype."""
    with kept(case.device):
        problem = _problem(case, _inside(case), "outside any region")
    if problem:
        F.fail(case, F.RUNS_STATE, problem, _lines(case))


def check_nesting(case: WrapperCase) -> None:
    """Inside a region of the other dtype, and inside a disabled one, the body still runs
    in the declared state, and the outer state is back after."""
    dev, problems = case.device, []
    for enabled in (True, False):
        outer = torch.autocast(dev, dtype=other_dtype(case.amp_dtype), enabled=enabled)
        where = (f"inside torch.autocast({dev!r}, dtype={other_dtype(case.amp_dtype)})"
                 if enabled else f"inside torch.autocast({dev!r}, enabled=False)")
        with kept(dev), outer:
            before = AutocastState.capture(dev)
            problems.append(_problem(case, _inside(case), where, before.dtype))
            if not case.fake:  # a fake step ends by an exception: ``restored``'s
                problems += [f"{where}, after the runner: {c}"
                             for c in before.diff(AutocastState.capture(dev))]
    problems = [p for p in problems if p]
    if problems:
        F.fail(case, F.RUNS_NESTED, problems, _lines(case, f"with torch.autocast({dev!r}, "
                                                       f"dtype={other_dtype(case.amp_dtype)}):"))


def _raise() -> Any:
    raise _Raised("raised by the body")


def check_restored(case: WrapperCase) -> None:
    """The whole autocast state after the runner equals the one before (starting from the
    other dtype, so a leaked dtype shows), after the body raises (the exception reaching the
    caller) and on return."""
    dev, problems = case.device, []
    with kept(dev):
        torch.set_autocast_dtype(dev, other_dtype(case.amp_dtype))
        before = AutocastState.capture(dev)
        try:
            case.wrapper.runs(_raise, case.precision, dev)
            problems.append("the exception the body raised did not reach the caller")
        except _Raised:
            pass
        problems += [f"after the body raised: {c}"
                     for c in before.diff(AutocastState.capture(dev))]
        before.restore()
        try:
            case.wrapper.runs(lambda: None, case.precision, dev)
        except NotApplicable:
            if not problems:  # a fake device's step that cannot return: the reason stands
                raise
        else:
            problems += [f"after it returned: {c}"
                         for c in before.diff(AutocastState.capture(dev))]
    if problems:
        F.fail(case, F.RESTORED, problems, _restored_lines(case, raised=any(
            p.startswith(("after the body raised", "the exception")) for p in problems)))


def _restored_lines(case: WrapperCase, raised: bool) -> list[str]:
    """The scenario that failed, a body that raises or one that returns, printing what
    differs in the whole autocast state (every device's, the cache flag, the nesting)."""
    dev, p = case.device, case.precision
    head = ["from amp_conformance.core.state import AutocastState",
            f"torch.set_autocast_dtype({dev!r}, {other_dtype(case.amp_dtype)})",
            f"before = AutocastState.capture({dev!r})"]
    show = f"print(before.diff(AutocastState.capture({dev!r})))  # what differs from before"
    if not raised:
        return [*head, f"decl.runs(lambda: None, {p!r}, {dev!r})", show]
    return [*head, "def body():", "    raise RuntimeError('raised by the body')", "try:",
            f"    decl.runs(body, {p!r}, {dev!r})", "except RuntimeError:",
            "    pass  # it reached the caller", show]
