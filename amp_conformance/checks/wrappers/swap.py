"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.RegionSwap`.

A swap is entered inside a region of the device's autocast (each amp dtype of the run):
inside it autocast stays on in the declared dtype (its matmul computes in it, the cast-cache
flag as it was), and on exit the region's dtype is back (``state``); the region's whole
state is back after a return and after an exception, which reaches the caller
(``restored``); nested in itself, around a ``torch.autocast`` of another dtype, and inside a
disabled region nested in an enabled one (where it must not turn autocast on) each state
comes back (``nesting``); outside any region it does as declared (``outside``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.declare import ERROR, tensor
from amp_conformance.checks.wrappers.island import Raised, Trace, target
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core import devices
from amp_conformance.core.errors import describe_error
from amp_conformance.core.state import AutocastState

State = tuple[bool, torch.dtype]


def swap(case: WrapperCase) -> AbstractContextManager:
    return case.wrapper.make(case.device)


def own(device: str) -> State:
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def _name(state: State) -> str:
    return f"enabled={state[0]}, dtype={devices.dtype_name(state[1])}"


def _want(where: str, got: State, want: State) -> list[str]:
    return [] if got == want else [f"{where}: {_name(got)}; expected {_name(want)}"]


def _repro(case: WrapperCase, *body: str) -> list[str]:
    d = case.device
    return [f"with torch.autocast({d!r}, dtype={case.amp_dtype}):",
            f"    with decl.make({d!r}):", *(f"        {b}" for b in body or (
                f"print(torch.is_autocast_enabled({d!r}), torch.get_autocast_dtype({d!r}))",)),
            f"    print(torch.get_autocast_dtype({d!r}))"]


def check_state(case: WrapperCase) -> None:
    """Inside a region, the swap keeps autocast on in its dtype (a matmul computes in it)
    and leaves the cache flag; on exit the region's dtype is back."""
    t, dev, to = target(case), case.device, case.wrapper.to
    problems = []
    with kept(dev):
        x = tensor(8, 8, device=dev)
        with t.autocast(case.amp_dtype):
            cache = torch.is_autocast_cache_enabled()
            with swap(case), Trace() as trace:
                inside, cache_inside = own(dev), torch.is_autocast_cache_enabled()
                torch.mm(x, x)
            problems += _want("inside the swap", inside, (True, to))
            problems += _want("after the swap", own(dev), (True, case.amp_dtype))
    computed = [d for _, dtypes in trace.ops for d in dtypes]
    if computed and computed[-1] != to:
        problems.append(f"inside the swap torch.mm computed in {devices.dtype_name(computed[-1])}"
                        f", not {devices.dtype_name(to)}")
    if cache_inside != cache:
        problems.append(f"inside the swap the cast-cache flag is {cache_inside}, the region's "
                        f"{cache}")
    if problems:
        F.fail(case, F.SWAP_STATE, problems, _repro(case))


def check_restored(case: WrapperCase) -> None:
    """The region's whole state (its cast cache off, so a swap that turns it on shows) is
    back after the swap returns and after an exception inside, which reaches the caller."""
    t, dev, problems = target(case), case.device, []
    with kept(dev), t.autocast(case.amp_dtype, cache_enabled=False):
        before = AutocastState.capture(dev)
        with swap(case):
            pass
        problems += [f"after it returned: {c}" for c in before.diff(AutocastState.capture(dev))]
        before.restore()
        try:
            with swap(case):
                raise Raised("raised inside the swap")
            problems.append("the exception raised inside the swap did not reach the caller")
        except Raised:
            pass
        problems += [f"after an exception inside it: {c}"
                     for c in before.diff(AutocastState.capture(dev))]
    if problems:
        F.fail(case, F.SWAP_RESTORED, problems, _repro(case, "raise RuntimeError"))


def check_nesting(case: WrapperCase) -> None:
    """In itself (the swap's dtype inside both, the region's after), around a torch.autocast
    of the other dtype (that dtype inside it, the swap's after), and inside a disabled region
    nested in an enabled one (autocast stays off, the states back after)."""
    t, dev, to, amp = target(case), case.device, case.wrapper.to, case.amp_dtype
    problems = []
    with kept(dev), t.autocast(amp):
        with swap(case):
            with swap(case):
                problems += _want("inside the swap in itself", own(dev), (True, to))
            problems += _want("after the inner swap", own(dev), (True, to))
            with t.autocast(other_dtype(to)):
                problems += _want(f"inside torch.autocast({dev!r}, dtype={other_dtype(to)}) "
                                  "in the swap", own(dev), (True, other_dtype(to)))
            problems += _want("after that region, in the swap", own(dev), (True, to))
        problems += _want("after the nested swaps", own(dev), (True, amp))
        with t.autocast(amp, enabled=False):
            before = AutocastState.capture(dev)
            with swap(case):
                if torch.is_autocast_enabled(dev):
                    problems.append("inside a disabled region it turned autocast on")
            problems += [f"after it, inside the disabled region: {c}"
                         for c in before.diff(AutocastState.capture(dev))]
        problems += _want("after the disabled region", own(dev), (True, amp))
    if problems:
        F.fail(case, F.SWAP_NESTING, problems, _repro(case, f"with decl.make({dev!r}):",
                                                      f"    print(torch.get_autocast_dtype("
                                                      f"{dev!r}))"))


def check_outside(case: WrapperCase) -> None:
    """Outside any enabled region the swap leaves autocast off and the state as it was
    (``outside="noop"``), or raises (``"error"``), the state as it was after."""
    dev, problems = case.device, []
    with kept(dev):
        torch.set_autocast_dtype(dev, case.amp_dtype)
        before = AutocastState.capture(dev)
        raised: BaseException | None = None
        try:
            with swap(case):
                inside = own(dev)
        except Exception as exc:  # noqa: BLE001 - a library's swap may raise anything
            raised, inside = exc, own(dev)
        after = before.diff(AutocastState.capture(dev))
    if case.wrapper.outside == ERROR and raised is None:
        problems.append(f"it entered ({_name(inside)}) instead of raising (declared "
                        "outside='error')")
    if case.wrapper.outside != ERROR and raised is not None:
        problems.append(f"it raised {describe_error(raised)} (declared outside='noop')")
    if raised is None and inside[0]:
        problems.append(f"inside it, outside any region: {_name(inside)}; expected autocast "
                        "off")
    problems += [f"after it: {c}" for c in after]
    if problems:
        F.fail(case, F.SWAP_OUTSIDE, problems, [
            f"with decl.make({dev!r}):",
            f"    print(torch.is_autocast_enabled({dev!r}), torch.get_autocast_dtype({dev!r}))",
            f"print(torch.is_autocast_enabled({dev!r}))"])


@contextlib.contextmanager
def entered(case: WrapperCase) -> Iterator[None]:
    """The swap inside a region of the case's dtype (for the other-devices check)."""
    with target(case).autocast(case.amp_dtype), swap(case):
        yield
