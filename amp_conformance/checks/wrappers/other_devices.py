"""Every wrapper reads and changes its own device's autocast state alone.

``torch.is_autocast_enabled()`` without a device reads CUDA's flag, and a helper that
enters ``torch.autocast("cuda")`` whatever its tensors' device changes CUDA's state: on a
CPU both go unnoticed while every other device's state is at its default. So each wrapper
is run on its device while every other device type torch keeps a state for is switched
on and off, in either amp dtype: what the wrapper does on its own device (its region's
state inside and after, what a decorated forward receives, the dtypes an island computes
in; also after an exception) must not change, and the other devices' states must stay as
set, inside and after. A difference names the device read (found by switching one device
at a time) or changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers import island as I
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.devices_repro import reproduction
from amp_conformance.checks.wrappers.fake_device import on_device
from amp_conformance.checks.wrappers.island_inputs import built
from amp_conformance.checks.wrappers.region import kept, other_dtype, region
from amp_conformance.core import devices
from amp_conformance.core.casting import tensors_in
from amp_conformance.core.state import autocast_device_types

State = tuple[bool, torch.dtype]


def others(device: str) -> tuple[str, ...]:
    return tuple(d for d in autocast_device_types() if d != device)


def _states(names: tuple[str, ...]) -> dict[str, State]:
    return {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in names}


class _Seen:
    """What one run of the wrapper did on its own device, and the other devices' states at
    the points it looked (each compared with the setting)."""

    def __init__(self, device: str):
        self.device, self.names = device, others(device)
        self.own: list[tuple[str, Any]] = []
        self.theirs: list[tuple[str, dict[str, State]]] = []

    def look(self, point: str, own: Any = None) -> None:
        self.own.append((point, own if own is not None else _own(self.device)))
        self.theirs.append((point, _states(self.names)))


def _own(device: str) -> State:
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)


class Shown(_Seen):
    """A reproduction's eyes: at each point it prints what the check compares there (the
    wrapper's own device's state, or what it looked at) and ``other``'s state, in the
    words of the check's failure."""

    def __init__(self, device: str, other: str):
        super().__init__(device)
        self.names = (other,)

    def look(self, point: str, own: Any = None) -> None:
        super().look(point, own)
        print(f"{point}: {self.own[-1][1]!r}; " + "; ".join(
            f"{d} reads {_state(s)}" for d, s in self.theirs[-1][1].items()))


def computed(trace: I.Trace, out: Any) -> tuple[Any, ...]:
    """What an island computed in: its ops' dtypes and its outputs'."""
    return tuple(trace.ops), tuple(t.dtype for t in tensors_in(out))


def _region(case: WrapperCase, seen: _Seen) -> None:
    with region(case):
        seen.look("inside the region")
    seen.look("after the region")
    with contextlib.suppress(I.Raised), region(case):
        raise I.Raised
    seen.look("after an exception inside the region")


def _runner(case: WrapperCase, seen: _Seen) -> None:
    from amp_conformance.checks.wrappers.runner import step

    step(case, lambda: seen.look("inside the body"))
    seen.look("after the runner")

    def fail() -> None:
        raise I.Raised
    with contextlib.suppress(I.Raised):
        case.wrapper.runs(fail, case.precision, case.device)
    seen.look("after the body raised")


def _forward(case: WrapperCase, seen: _Seen) -> None:
    dev, t = case.device, I.target(case)

    def forward(x: torch.Tensor, fail: bool = False) -> torch.Tensor:
        seen.look("inside the forward", (x.dtype, _own(dev)))
        if fail:
            raise I.Raised
        return x * 2

    decorated = case.wrapper.decorate(forward)
    x = torch.ones(2, 2, device=dev).to(torch.float32 if case.wrapper.cast_dtype != torch.float32
                                        else case.amp_dtype)
    for name, context in (("in a region", t.autocast(case.amp_dtype)), ("outside", None)):
        with context or contextlib.nullcontext():
            with Looking(seen, f"{name}, in the decorated forward"):
                decorated(x)
            seen.look(f"{name}, after the forward")
            with contextlib.suppress(I.Raised), Looking(seen, f"{name}, in the decorated "
                                                               "forward that raises"):
                decorated(x, fail=True)
            seen.look(f"{name}, after the forward raised")


def _island(case: WrapperCase, seen: _Seen) -> None:
    t = I.target(case)
    island, made, rules = built(case)
    # inputs as it meets them: the region's activations inside one, float32 outside
    for name, context, xs in (
            ("in a region", t.autocast(case.amp_dtype),
             I.activations(t, rules, made, case.amp_dtype)),
            ("outside", None, I.activations(t, rules, made, torch.float32))):
        with context or contextlib.nullcontext():
            with I.Trace() as trace, Looking(seen, f"{name}, inside the island"):
                out = island(*xs)
            seen.look(f"{name}, what it computed in", computed(trace, out))
            seen.look(f"{name}, after the island")
            with contextlib.suppress(I.Raised):
                I.run_traced(island, xs, raise_first=True)
            seen.look(f"{name}, after an op inside the island raised")


class Looking(TorchFunctionMode):
    """Looks at every device's state at each torch call inside the wrapper, above the
    dispatcher: a call made inside a dispatch mode's handler (fewer modes on the stack
    than when it was entered) is below it, where every autocast flag reads False (the
    legacy constructor ``torch.Tensor([k])`` lifts its tensor there)."""

    def __init__(self, seen: _Seen, point: str):
        super().__init__()
        self.seen, self.point, self.calls = seen, point, 0
        self.depth = 0

    def __enter__(self):
        self.depth = torch._C._len_torch_dispatch_stack()
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if torch._C._len_torch_dispatch_stack() < self.depth:
            return func(*args, **(kwargs or {}))
        self.calls += 1
        name = getattr(func, "__name__", str(func))
        if name == "__get__":  # a property, e.g. Tensor.mT
            name = getattr(getattr(func, "__self__", None), "__name__", name)
        self.seen.look(f"{self.point}, at call {self.calls} ({name})")
        return func(*args, **(kwargs or {}))


def _swap(case: WrapperCase, seen: _Seen) -> None:
    from amp_conformance.checks.wrappers.swap import entered

    with entered(case):
        seen.look("inside the swap")
    with I.target(case).autocast(case.amp_dtype):
        seen.look("after the swap, in its region")
        with contextlib.suppress(I.Raised), case.wrapper.make(case.device):
            raise I.Raised
        seen.look("after an exception inside the swap")


def _predicate(case: WrapperCase, seen: _Seen) -> None:
    from amp_conformance.checks.wrappers.predicate import argument

    x = argument(case)
    seen.look("its answer outside any region", case.wrapper.answers(x))
    with I.target(case).autocast(case.amp_dtype):
        seen.look("its answer inside a region", case.wrapper.answers(x))


RUNS: dict[str, Callable[[WrapperCase, _Seen], None]] = {
    "region": _region, "runner": _runner, "forward": _forward, "island": _island,
    "swap": _swap, "predicate": _predicate}


def settings(dtype: torch.dtype) -> tuple[State, ...]:
    """The other devices' states tried: off and on, in either amp dtype."""
    other = other_dtype(dtype)
    return ((False, other), (True, other), (True, dtype), (False, dtype))


def observe(case: WrapperCase, state: dict[str, State]) -> _Seen:
    """One run of the wrapper with the other devices in ``state``."""
    seen = _Seen(case.device)
    with kept(case.device):
        for d, (enabled, dtype) in state.items():
            torch.set_autocast_enabled(d, enabled)
            torch.set_autocast_dtype(d, dtype)
        RUNS[case.kind](case, seen)
    return seen


def _changed(seen: _Seen, state: dict[str, State]) -> list[str]:
    found = []
    for point, theirs in seen.theirs:
        for d, got in theirs.items():
            if got != state[d]:
                found.append(f"{point}: {d} reads {_state(got)}, where it was set to "
                             f"{_state(state[d])}")
    return found


def _state(s: State) -> str:
    return f"enabled={s[0]}, dtype={devices.dtype_name(s[1])}"


def _differs(a: _Seen, b: _Seen) -> tuple[str, str] | None:
    """Where ``b``'s run first differs from ``a``'s on the wrapper's own device: the point,
    and the difference described."""
    for (point, mine), (other, theirs) in zip(a.own, b.own, strict=False):
        if point != other:
            return point, f"it went another way: {other} instead of {point}"
        if mine != theirs:
            return point, f"{point}: {theirs!r} instead of {mine!r}"
    if len(a.own) != len(b.own):
        longer = a.own if len(a.own) > len(b.own) else b.own
        point = longer[min(len(a.own), len(b.own))][0]
        return point, (f"it made {len(b.own)} torch calls instead of {len(a.own)}; the first "
                       f"not in both: {point}")
    return None


def check_devices(case: WrapperCase) -> None:
    """The wrapper does the same on its device whatever the other devices' states, and
    leaves those states as they were set."""
    names = others(case.device)
    tried = settings(case.amp_dtype)
    with on_device(I.target(case)):
        base_state = dict.fromkeys(names, tried[0])
        base = observe(case, base_state)
        changed, under = _changed(base, base_state), tried[0]
        for setting in tried[1:]:
            every = dict.fromkeys(names, setting)
            seen = observe(case, every)
            if not changed:
                changed, under = _changed(seen, every), setting
            if _differs(base, seen) is not None:
                _fail_reads(case, base, setting, names)
    if changed:
        culprits = sorted({c.split(": ")[1].split(" ")[0] for c in changed})
        F.fail(case, F.CHANGES_OTHER, [f"it changed {', '.join(culprits)}'s autocast state",
                                       *changed[:6]],
               reproduction(case, culprits[0], under, changed[0].split(": ")[0]))


def _fail_reads(case: WrapperCase, base: _Seen, setting: State, names: tuple[str, ...]) -> None:
    """Find the device whose state alone changes what the wrapper does, and fail naming it."""
    read, point, detail = [], "", ""
    for d in names:
        one = {n: settings(case.amp_dtype)[0] for n in names} | {d: setting}
        difference = _differs(base, observe(case, one))
        if difference is not None:
            read.append(d)
            point, detail = (point, detail) if detail else difference
    who = ", ".join(read) if read else "a combination of " + ", ".join(names)
    F.fail(case, F.READS_OTHER, [
        f"with {who}'s autocast state {_state(setting)}, it does something else on "
        f"{case.device}: it reads {who}'s state", detail or "(only all of them together)"],
        reproduction(case, read[0] if read else names[0], setting, point))
