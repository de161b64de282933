"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.RegionFactory`.

Each enters the wrapper's region (``wrapper.make(precision, device)``) where the region
checks of the suite enter ``torch.autocast``, and holds it to its declaration and to
autocast's contract: the state inside, the state restored on exit (also after an exception
and when nested), the decorator form, the cast cache released at the outermost exit, and a
few op-list entries' policy (:func:`amp_conformance.checks.policy.check.check_policy`,
entering the wrapper's region through :class:`RegionTarget`). Every check leaves the
autocast state of every device as it found it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch

from amp_conformance.checks.cache_interactions.check import CastTracker
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.policy import check as policy_check
from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.declare import ERROR, FALLBACK, NOOP
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.probes import weight_and_input
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target


class _Raised(Exception):
    """The exception the exception check raises inside the region."""


@contextlib.contextmanager
def kept(device: str) -> Iterator[AutocastState]:
    """Restore the whole autocast state on the way out, whatever happened inside."""
    before = AutocastState.capture(device)
    try:
        yield before
    finally:
        before.restore()


def region(case: WrapperCase, precision: str | None = None) -> AbstractContextManager:
    return case.wrapper.make(precision or case.precision, case.device)


def _make_line(case: WrapperCase, precision: str | None = None) -> str:
    return f"decl.make({precision or case.precision!r}, {case.device!r})"


def expected(case: WrapperCase, ambient: torch.dtype | None = None
             ) -> tuple[bool, torch.dtype | None]:
    """(enabled, dtype) the declaration promises inside the region (dtype None: any);
    ``ambient``: the autocast dtype set when the region was entered, the dtype of a
    precision declared in ``ambient_dtype``."""
    if case.device in case.wrapper.noop_devices:
        return False, None
    if ambient is not None and case.precision in case.wrapper.ambient_dtype:
        return True, ambient
    return True, case.amp_dtype


def _seen(device: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


def _state_problem(case: WrapperCase, seen: tuple[bool, torch.dtype], what: str,
                   ambient: torch.dtype | None = None) -> str | None:
    enabled, dtype = expected(case, ambient)
    if seen[0] == enabled and (dtype is None or seen[1] == dtype):
        return None
    want = f"enabled={enabled}" + (f", dtype={devices.dtype_name(dtype)}" if dtype else "")
    why = (f" (declared a no-op on {case.device}: {case.wrapper.noop_devices[case.device]})"
           if case.device in case.wrapper.noop_devices else "")
    return (f"{what}: enabled={seen[0]}, dtype={devices.dtype_name(seen[1])}; expected "
            f"{want}{why}")


def _print_state(device: str) -> str:
    return f"print(torch.is_autocast_enabled({device!r}), torch.get_autocast_dtype({device!r}))"


def check_state(case: WrapperCase) -> None:
    """Inside the region autocast is on with the declared dtype (off on a no-op device)."""
    with kept(case.device) as before:
        with region(case):
            seen = _seen(case.device)
    problem = _state_problem(case, seen, "inside the region", before.dtype)
    if problem:
        F.fail(case, F.STATE, problem, [f"with {_make_line(case)}:",
                                        f"    {_print_state(case.device)}"])


def _entered(case: WrapperCase, name: str) -> tuple[bool, torch.dtype] | BaseException:
    """The state inside the region of ``name``, or the exception making or entering it raised."""
    try:
        with kept(case.device), case.wrapper.make(name, case.device):
            return _seen(case.device)
    except Exception as exc:  # noqa: BLE001 - a wrapper may raise anything for a bad name
        return exc


def check_float32(case: WrapperCase) -> None:
    """Each float32 name leaves autocast off (or raises, when ``float32 = "error"``)."""
    w, dev = case.wrapper, case.device
    for name in w.float32_names:
        got = _entered(case, name)
        repro = [f"with decl.make({name!r}, {dev!r}):", f"    {_print_state(dev)}"]
        if w.float32 == ERROR and not isinstance(got, BaseException):
            F.fail(case, F.FLOAT32_ERROR, f"decl.make({name!r}, {dev!r}) entered a region "
                   f"(enabled={got[0]}) instead of raising (declared float32='error')", repro)
        if w.float32 == NOOP and isinstance(got, BaseException):
            F.fail(case, F.FLOAT32, f"decl.make({name!r}, {dev!r}) raised "
                   f"{describe_error(got)} (declared float32='noop')", repro)
        if w.float32 == NOOP and got[0]:
            F.fail(case, F.FLOAT32, f"inside the region of {name!r} autocast is enabled "
                   f"(dtype {devices.dtype_name(got[1])})", repro)


def check_unknown(case: WrapperCase) -> None:
    """The unknown probe behaves as ``unknown`` says: off, raises, or the fallback dtype."""
    w, dev, name = case.wrapper, case.device, case.wrapper.unknown_probe
    got = _entered(case, name)
    repro = [f"with decl.make({name!r}, {dev!r}):", f"    {_print_state(dev)}"]
    if w.unknown == ERROR:
        if not isinstance(got, BaseException):
            F.fail(case, F.UNKNOWN, f"{name!r} entered a region (enabled={got[0]}) instead of "
                   "raising (declared unknown='error')", repro)
        return
    if isinstance(got, BaseException):
        F.fail(case, F.UNKNOWN, f"{name!r} raised {describe_error(got)} (declared "
               f"unknown={w.unknown!r})", repro)
    want = (True, w.fallback_dtype) if w.unknown == FALLBACK else (False, None)
    if got[0] != want[0] or (want[1] is not None and got[1] != want[1]):
        F.fail(case, F.UNKNOWN, f"inside the region of {name!r}: enabled={got[0]}, dtype="
               f"{devices.dtype_name(got[1])}; declared unknown={w.unknown!r}"
               + (f" to {devices.dtype_name(want[1])}" if want[1] else ""), repro)


def other_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float16 if dtype == torch.bfloat16 else torch.bfloat16


def check_restored(case: WrapperCase) -> None:
    """The device's whole AutocastState equals the one before, after a normal exit and after
    an exception raised inside (starting from a dtype other than the declared one, so a
    dtype that leaks shows)."""
    dev, start = case.device, other_dtype(case.amp_dtype)
    setup = f"torch.set_autocast_dtype({dev!r}, {start})"
    with kept(dev):
        torch.set_autocast_dtype(dev, start)
        before = AutocastState.capture(dev)
        with region(case):
            pass
        changes = before.diff(AutocastState.capture(dev))
        if changes:
            F.fail(case, F.RESTORED, [f"after the region: {c}" for c in changes],
                   [setup, f"with {_make_line(case)}:", "    pass", _print_state(dev)])
        before.restore()
        escaped = None
        try:
            with region(case):
                raise _Raised("raised inside the region")
        except _Raised as exc:
            escaped = exc
        changes = before.diff(AutocastState.capture(dev))
    repro = [setup, "try:", f"    with {_make_line(case)}:", "        raise RuntimeError",
             "except RuntimeError:", "    pass", _print_state(dev)]
    if escaped is None:
        F.fail(case, F.RESTORED_EXCEPTION, "the exception raised inside the region did not "
               "propagate (the region swallowed it)", repro)
    if changes:
        F.fail(case, F.RESTORED_EXCEPTION,
               [f"after an exception raised inside the region: {c}" for c in changes], repro)


def _outers(case: WrapperCase) -> list[tuple[str, Callable[[], AbstractContextManager]]]:
    dev, other = case.device, other_dtype(case.amp_dtype)
    found = [(f"torch.autocast({dev!r}, dtype={other})",
              lambda: torch.autocast(dev, dtype=other))]
    for name in case.wrapper.precisions:
        if name != case.precision:
            found.append((_make_line(case, name), lambda n=name: region(case, n)))
            break
    return found


def check_nesting(case: WrapperCase) -> None:
    """Inside an outer region (torch.autocast of the other dtype, the wrapper's other
    precision) the region sets its state and restores the outer state on exit."""
    dev = case.device
    for text, outer in _outers(case):
        repro = [f"with {text}:", f"    {_print_state(dev)}", f"    with {_make_line(case)}:",
                 f"        {_print_state(dev)}", f"    {_print_state(dev)}"]
        with kept(dev) as start:
            with outer():
                outer_state = AutocastState.capture(dev)
                with region(case):
                    seen = _seen(dev)
                changes = outer_state.diff(AutocastState.capture(dev))
            after = start.diff(AutocastState.capture(dev))
        problem = _state_problem(case, seen, f"inside {text}", outer_state.dtype)
        if problem and case.device not in case.wrapper.noop_devices:
            F.fail(case, F.STATE, problem, repro)
        if changes:
            F.fail(case, F.NESTING, [f"inside {text}, after the inner region: {c}"
                                     for c in changes], repro)
        if after:
            F.fail(case, F.NESTING, [f"after {text}: {c}" for c in after], repro)


def check_decorator(case: WrapperCase) -> None:
    """``make(...)`` used as a decorator: the function runs in the declared state, twice,
    and the state is restored after each call."""
    dev, seen = case.device, []
    repro = [f"@{_make_line(case)}", "def f():", f"    {_print_state(dev)}", "f(); f()",
             _print_state(dev)]
    with kept(dev) as before:
        try:
            decorated = region(case)(lambda: seen.append(_seen(dev)))
        except TypeError as exc:
            F.fail(case, F.DECORATOR, f"decorating raised {describe_error(exc)}", repro)
        for call in (1, 2):
            decorated()
            changes = before.diff(AutocastState.capture(dev))
            if changes:
                F.fail(case, F.DECORATOR, [f"after call {call}: {c}" for c in changes], repro)
    for call, state in enumerate(seen, 1):
        problem = _state_problem(case, state, f"inside the decorated function, call {call}",
                                 before.dtype)
        if problem:
            F.fail(case, F.DECORATOR, problem, repro)
    if len(seen) != 2:
        F.fail(case, F.DECORATOR, f"the decorated function ran {len(seen)} times in 2 calls",
               repro)
    _decorated_raises(case)


def _decorated_raises(case: WrapperCase) -> None:
    """A decorated function that raises: the exception reaches the caller and the state
    before the call is back."""
    dev = case.device

    def boom() -> None:
        raise _Raised("raised inside the decorated function")
    escaped = None
    with kept(dev) as before:
        try:
            region(case)(boom)()
        except _Raised as exc:
            escaped = exc
        changes = before.diff(AutocastState.capture(dev))
    repro = [f"@{_make_line(case)}", "def f():", "    raise RuntimeError", "try:", "    f()",
             "except RuntimeError:", "    pass", _print_state(dev)]
    if escaped is None:
        F.fail(case, F.DECORATOR_RAISES, "the decorated function's exception did not reach "
               "the caller", repro)
    if changes:
        F.fail(case, F.DECORATOR_RAISES, [f"after the decorated function raised: {c}"
                                          for c in changes], repro)


def check_cache(case: WrapperCase) -> None:
    """A float32 parameter's cast, cached inside the region, is released at its outermost
    exit, as torch.autocast does (checks/cache_interactions/check.py's CastTracker counts them)."""
    dev = case.device
    w, x = weight_and_input(dev)
    x = x.detach()
    with kept(dev), CastTracker(w) as tracker:
        with region(case), torch.no_grad():
            torch.mm(x, w)
            torch.mm(x, w)
        after = tracker.alive()
        made = len(tracker.refs)
        torch.clear_autocast_cache()
    if after:
        F.fail(case, F.CACHE, f"{after} cast(s) of a float32 parameter ({made} made inside) "
               "still alive after the region ended: the outermost exit did not clear the "
               "cast cache (torch.autocast calls torch.clear_autocast_cache there)",
               ["w = torch.randn(8, 8, requires_grad=True); x = torch.randn(8, 8)",
                f"with {_make_line(case)}, torch.no_grad():", "    torch.mm(x, w)",
                "# the cast of w is still held by the cast cache here"])


@dataclass(frozen=True)
class RegionTarget(Target):
    """The device, whose enabled autocast regions are the wrapper's region: the policy
    check enters ``region()`` where it would enter ``torch.autocast``."""

    region: Callable[[], AbstractContextManager] | None = field(default=None, compare=False)

    def autocast(self, dtype=None, enabled=True, cache_enabled=None):
        if enabled and cache_enabled is None and self.region is not None:
            return self.region()
        return super().autocast(dtype, enabled, cache_enabled)


#: the policies spot-checked and the entries preferred for each
SPOT_POLICIES = {"lower": ("mm", "linear"), "fp32": ("mse_loss", "softmax"),
                 "promote": ("cat", "stack")}


def spot_cases(case: WrapperCase, oplists: tuple[str, ...], numerics: str) -> list[Case]:
    """One op-list entry of each spot-checked policy that applies to this dtype."""
    target = RegionTarget(case.device, case.fake, region=lambda: region(case))
    entries = load_oplist(case.device, oplists).entries
    chosen = []
    for policy, preferred in SPOT_POLICIES.items():
        usable = [Case(target, case.amp_dtype, e, numerics) for e in entries
                  if e.policy == policy]
        usable = [c for c in usable if c.skip_reason("policy") is None]
        usable.sort(key=lambda c: (preferred.index(c.entry.op) if c.entry.op in preferred
                                   else len(preferred), c.entry.id))
        chosen += usable[:1]
    return chosen


def check_policy(case: WrapperCase, oplists: tuple[str, ...], numerics: str) -> list[str]:
    """Entries of the device's lists give inside the wrapper's region the dtypes they give
    inside torch.autocast with the declared dtype; returns the entries checked."""
    spots = spot_cases(case, oplists, numerics)
    for spot in spots:
        try:
            policy_check.check_policy(spot)
        except ConformanceFailure as exc:
            F.fail(case, F.POLICY, [f"entry {spot.entry.id} ({spot.entry.qualname}):",
                                    *str(exc).splitlines()],
                   [f"# the op-list reproduction above, with `with {_make_line(case)}:` in "
                    "place of torch.autocast"])
    return [s.entry.id for s in spots]
