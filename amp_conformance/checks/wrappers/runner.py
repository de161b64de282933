"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.RegionRunner`.

A runner hands out no region: it calls the user's code (``body``) inside one it enters
itself. So the checks are made through the body: it sees the declared state on the device
(``state``), alone and inside an outer region of the other dtype or a disabled one, whose
state comes back after (``nesting``); the caller's whole autocast state is back after the
runner returns and after the body raises, the exception reaching the caller (``restored``).
"""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core import devices
from amp_conformance.core.state import AutocastState


class _Raised(Exception):
    """Raised by the body, to see what the runner restores after it."""


def _inside(case: WrapperCase) -> tuple[bool, torch.dtype]:
    """The device's (enabled, dtype) the body saw."""
    seen: list[tuple[bool, torch.dtype]] = []
    dev = case.device
    case.wrapper.runs(lambda: seen.append((torch.is_autocast_enabled(dev),
                                           torch.get_autocast_dtype(dev))),
                      case.precision, dev)
    if not seen:
        F.fail(case, F.RUNS_STATE, "the body was never called", _lines(case))
    return seen[-1]


def _lines(case: WrapperCase, *before: str) -> list[str]:
    d = case.device
    indent = "    " if before else ""
    return [*before, f"{indent}decl.runs(lambda: print(torch.is_autocast_enabled({d!r}), "
                     f"torch.get_autocast_dtype({d!r})), {case.precision!r}, {d!r})"]


def _problem(case: WrapperCase, seen: tuple[bool, torch.dtype], where: str) -> str | None:
    if seen == (True, case.amp_dtype):
        return None
    return (f"{where}: the body ran with enabled={seen[0]}, dtype={devices.dtype_name(seen[1])}; "
            f"expected enabled=True, dtype={devices.dtype_name(case.amp_dtype)}")


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
            problems.append(_problem(case, _inside(case), where))
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
    other dtype, so a leaked dtype shows), on return and after the body raises; the
    body's exception reaches the caller."""
    dev, problems = case.device, []
    with kept(dev):
        torch.set_autocast_dtype(dev, other_dtype(case.amp_dtype))
        before = AutocastState.capture(dev)
        case.wrapper.runs(lambda: None, case.precision, dev)
        problems += [f"after it returned: {c}" for c in before.diff(AutocastState.capture(dev))]
        before.restore()
        try:
            case.wrapper.runs(_raise, case.precision, dev)
            problems.append("the exception the body raised did not reach the caller")
        except _Raised:
            pass
        problems += [f"after the body raised: {c}"
                     for c in before.diff(AutocastState.capture(dev))]
    if problems:
        F.fail(case, F.RESTORED, problems, [
            f"torch.set_autocast_dtype({dev!r}, {other_dtype(case.amp_dtype)})",
            f"decl.runs(lambda: None, {case.precision!r}, {dev!r})",
            f"print(torch.is_autocast_enabled({dev!r}), torch.get_autocast_dtype({dev!r}))"])
