"""A region factory's region in every nesting and reuse a model's code gives it.

A forward that enters the wrapper's region may be called from inside the same region (the
same precision or another), inside or around ``torch.autocast`` (enabled or disabled), from
another thread, and the same region object may be entered again after it exits. torch.autocast
keeps each outer state, leaves other threads alone and clears the cast cache only when the
outermost region of the thread exits; a wrapper must too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from amp_conformance.checks.cache_interactions.check import CastTracker
from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.region import (
    _make_line,
    _print_state,
    _seen,
    _state_problem,
    kept,
    other_dtype,
    region,
)
from amp_conformance.core import devices
from amp_conformance.core.errors import describe_error
from amp_conformance.core.probes import weight_and_input
from amp_conformance.core.state import AutocastState, grad_and_dtype_restored

Factory = Callable[[], AbstractContextManager]
_WAIT_S = 30.0


def _inner_problem(case: WrapperCase, inner: str, seen: tuple[bool, torch.dtype],
                   where: str, ambient: torch.dtype) -> str | None:
    """Whether the state inside the inner region is the one that region sets."""
    if inner == "wrapper":
        return _state_problem(case, seen, where, ambient)
    want = (True, other_dtype(case.amp_dtype)) if inner == "autocast" else (False, None)
    if seen[0] == want[0] and (want[1] is None or seen[1] == want[1]):
        return None
    return (f"{where}: enabled={seen[0]}, dtype={devices.dtype_name(seen[1])}; expected "
            f"enabled={want[0]}" + (f", dtype={devices.dtype_name(want[1])}" if want[1] else ""))


def _nestings(case: WrapperCase) -> list[tuple[str, Factory, str, str, Factory]]:
    """(outer's text, outer, inner kind, inner's text, inner) for every nesting checked."""
    dev, other = case.device, other_dtype(case.amp_dtype)
    found = [(_make_line(case, name), lambda n=name: region(case, n), "wrapper",
              _make_line(case), lambda: region(case)) for name in case.wrapper.precisions]
    found.append((_make_line(case), lambda: region(case), "autocast",
                  f"torch.autocast({dev!r}, dtype={other})",
                  lambda: torch.autocast(dev, dtype=other)))
    found.append((_make_line(case), lambda: region(case), "disabled",
                  f"torch.autocast({dev!r}, enabled=False)",
                  lambda: torch.autocast(dev, enabled=False)))
    return found


def check_nest(case: WrapperCase) -> None:
    """Inside itself (each precision as the outer one), around torch.autocast of the other
    dtype and around a disabled region: the inner region has its own state, and each outer
    state comes back when the inner one exits."""
    dev = case.device
    for outer_text, outer, kind, inner_text, inner in _nestings(case):
        repro = [f"with {outer_text}:", f"    {_print_state(dev)}", f"    with {inner_text}:",
                 f"        {_print_state(dev)}", f"    {_print_state(dev)}",
                 _print_state(dev)]
        with kept(dev) as start:
            with outer():
                outer_state = AutocastState.capture(dev)
                with inner():
                    seen = _seen(dev)
                changes = outer_state.diff(AutocastState.capture(dev))
            after = start.diff(AutocastState.capture(dev))
        problems = [p for p in [_inner_problem(case, kind, seen, f"inside {inner_text}",
                                               outer_state.dtype)] if p]
        problems += [f"inside {outer_text}, after {inner_text} exited: {c}" for c in changes]
        problems += [f"after {outer_text} exited: {c}" for c in after]
        if problems:
            F.fail(case, F.NEST, problems, repro)


def check_reuse(case: WrapperCase) -> None:
    """One region object entered twice, the caller's dtype changed in between: the second
    entry sets the declared state and restores the state of its own entry. A region declared
    ``single_use`` must refuse the second entry instead, leaving the state as it was."""
    dev, why = case.device, case.wrapper.single_use
    repro = [f"r = {_make_line(case)}", "with r:", "    pass",
             f"torch.set_autocast_dtype({dev!r}, <the other dtype>)", "with r:",
             f"    {_print_state(dev)}", _print_state(dev)]
    with kept(dev):
        made = torch.get_autocast_dtype(dev)
        r = region(case)
        with r:
            pass
        torch.set_autocast_dtype(dev, other_dtype(torch.get_autocast_dtype(dev)))
        before, seen, refused = AutocastState.capture(dev), None, None
        try:
            with r:
                seen = _seen(dev)
        except Exception as exc:  # noqa: BLE001 - a single-use region may raise anything
            refused = exc
        changes = before.diff(AutocastState.capture(dev))
    if why:
        if refused is None:
            F.fail(case, F.SINGLE_USE, f"a second entry was accepted (declared single_use: "
                   f"{why})", repro)
        if changes:
            F.fail(case, F.SINGLE_USE, [f"after the refused entry: {c}" for c in changes], repro)
        return
    problems = [f"the second entry raised {describe_error(refused)}"] if refused else []
    problem = seen and _state_problem(case, seen, "inside the second entry", made)
    problems += [problem] if problem else []
    problems += [f"after the second entry: {c}" for c in changes]
    if problems:
        F.fail(case, F.REUSE, problems, repro)


def _peer(case: WrapperCase, steps: dict[str, threading.Event], out: dict[str, Any]) -> None:
    """The other thread: its own dtype, its own region, entered before the main thread's
    and exited while the main thread's is still open."""
    dev = case.device
    try:
        with kept(dev):
            torch.set_autocast_dtype(dev, case.amp_dtype)
            out["before"] = AutocastState.capture(dev)
            with region(case):
                out["seen"] = _seen(dev)
                steps["peer_in"].set()
                steps["main_in"].wait(_WAIT_S)
            out["after"] = AutocastState.capture(dev)
    except Exception as exc:  # noqa: BLE001 - reported by the main thread
        out["error"] = exc
    finally:
        steps["peer_in"].set()
        steps["peer_out"].set()


def check_threads(case: WrapperCase) -> None:
    """Two threads, each with its own autocast dtype, in overlapping regions of the wrapper
    (the other thread's exits while this one's is open): each sees its declared state and
    gets its own state back."""
    dev = case.device
    steps = {k: threading.Event() for k in ("peer_in", "main_in", "peer_out")}
    out: dict[str, Any] = {}
    peer = threading.Thread(target=_peer, args=(case, steps, out), daemon=True)
    with kept(dev):
        torch.set_autocast_dtype(dev, other_dtype(case.amp_dtype))
        before = AutocastState.capture(dev)
        peer.start()
        steps["peer_in"].wait(_WAIT_S)
        with region(case):
            seen = _seen(dev)
            steps["main_in"].set()
            steps["peer_out"].wait(_WAIT_S)
        changes = before.diff(AutocastState.capture(dev))
    peer.join(_WAIT_S)
    problems = [f"the other thread raised {describe_error(out['error'])}"] if "error" in out \
        else []
    theirs = out["before"].dtype if "before" in out else None
    for who, state, ambient in (("this thread", seen, before.dtype),
                                ("the other thread", out.get("seen"), theirs)):
        problem = state and _state_problem(case, state, f"inside the region, {who}", ambient)
        problems += [problem] if problem else []
    problems += [f"this thread, after its region: {c}" for c in changes]
    if "after" in out:
        problems += [f"the other thread, after its region (exited while this thread's was "
                     f"open): {c}" for c in out["before"].diff(out["after"])]
    if problems:
        F.fail(case, F.THREADS, problems, [
            "import threading", "def other():", f"    torch.set_autocast_dtype({dev!r}, "
            f"{case.amp_dtype})", f"    with {_make_line(case)}:", "        entered.set(); "
            "go.wait()", f"    {_print_state(dev)}  # its own dtype back?",
            "entered, go = threading.Event(), threading.Event()",
            f"torch.set_autocast_dtype({dev!r}, {other_dtype(case.amp_dtype)})",
            "t = threading.Thread(target=other); t.start(); entered.wait()",
            f"with {_make_line(case)}:", "    go.set(); t.join()", _print_state(dev)])


def _mixes(case: WrapperCase) -> list[tuple[str, list[tuple[str, Factory]],
                                            list[tuple[str, Factory]]]]:
    """(what, the regions around the cast, the regions entered and exited after it)."""
    dev, dt = case.device, case.amp_dtype
    wrap = (_make_line(case), lambda: region(case))
    auto = (f"torch.autocast({dev!r}, dtype={dt})", lambda: torch.autocast(dev, dtype=dt))
    off = (f"torch.autocast({dev!r}, enabled=False)", lambda: torch.autocast(dev, enabled=False))
    return [("the wrapper's region inside torch.autocast", [auto], [wrap]),
            ("torch.autocast inside the wrapper's region", [wrap], []),
            ("the wrapper's region inside itself", [wrap], [wrap]),
            ("a disabled region inside the wrapper's region", [wrap], [off]),
            ("the wrapper's region twice inside torch.autocast", [auto], [wrap, wrap])]


def _cast_alive(case: WrapperCase, outers: list, inners: list) -> tuple[int, int]:
    """Casts of a parameter still alive after the inner regions exit, and after the outer."""
    dev, (w, x) = case.device, weight_and_input(case.device)
    x = x.detach()
    with kept(dev), grad_and_dtype_restored(), CastTracker(w) as tracker:
        torch.set_grad_enabled(True)
        with contextlib.ExitStack() as stack:
            for _, outer in outers:
                stack.enter_context(outer())
            with torch.autocast(dev, dtype=case.amp_dtype, cache_enabled=True):
                torch.mm(x, w)  # the cast of w is cached; the output is dropped
            with contextlib.ExitStack() as inner_stack:
                for _, inner in inners:
                    inner_stack.enter_context(inner())
            inside = tracker.alive(allowed=1)
        after = tracker.alive()
        torch.clear_autocast_cache()
    return inside, after


def check_cache_mix(case: WrapperCase) -> None:
    """In each mix of the wrapper's region, torch.autocast and a disabled region, a cast
    cached inside stays cached until the outermost region exits, and is released then."""
    for what, outers, inners in _mixes(case):
        inside, after = _cast_alive(case, outers, inners)
        problems = []
        if inside == 0:
            problems.append(f"{what}: the cached cast was released before the outermost "
                            "exit (an inner exit cleared the cast cache)")
        if after:
            problems.append(f"{what}: {after} cast(s) still alive after the outermost exit")
        if problems:
            repro = ["w = torch.randn(8, 8, requires_grad=True); x = torch.randn(8, 8)"]
            for depth, (text, _) in enumerate(outers):
                repro.append("    " * depth + f"with {text}:")
            pad = "    " * len(outers)
            repro += [f"{pad}with torch.autocast({case.device!r}, dtype={case.amp_dtype}, "
                      "cache_enabled=True):", f"{pad}    torch.mm(x, w)  # cached"]
            for depth, (text, _) in enumerate(inners):
                repro.append(pad + "    " * depth + f"with {text}:")
            repro += [pad + "    " * len(inners) + "pass"] if inners else []
            repro.append(f"{pad}# the cast of w must still be cached here")
            F.fail(case, F.CACHE_OUTERMOST, problems, repro)
