"""The reproduction of a ``devices`` failure: the scenario its text names.

The check runs the wrapper through a fixed sequence of points (inside its region, after it,
after an exception inside it; for an island or a forward, at each torch call inside it, in a
region and outside one) while another device's state is set. The reproduction sets that
device's state as the failing run did, runs the same sequence around the point the failure
names, and prints at each point what the check compared there
(:class:`~amp_conformance.checks.wrappers.other_devices.Shown`), in the failure's words.
"""

from __future__ import annotations

import torch

from amp_conformance.checks.wrappers.cases import WrapperCase

IN_A_REGION, OUTSIDE = "in a region", "outside"


def _region(case: WrapperCase) -> list[str]:
    make = f"decl.make({case.precision!r}, {case.device!r})"
    return [f"with {make}:", "    seen.look('inside the region')", "seen.look('after the region')",
            "try:", f"    with {make}:", "        raise RuntimeError", "except RuntimeError:",
            "    pass", "seen.look('after an exception inside the region')"]


def _runner(case: WrapperCase) -> list[str]:
    args = f"{case.precision!r}, {case.device!r}"
    return [f"decl.runs(lambda: seen.look('inside the body'), {args})",
            "seen.look('after the runner')", "def body():", "    raise RuntimeError",
            "try:", f"    decl.runs(body, {args})", "except RuntimeError:", "    pass",
            "seen.look('after the body raised')"]


def _swap(case: WrapperCase) -> list[str]:
    d = case.device
    return [f"with torch.autocast({d!r}, dtype={case.amp_dtype}):",
            *("    " + line for line in [
                f"with decl.make({d!r}):", "    seen.look('inside the swap')",
                "seen.look('after the swap, in its region')", "try:",
                f"    with decl.make({d!r}):", "        raise RuntimeError",
                "except RuntimeError:", "    pass",
                "seen.look('after an exception inside the swap')"])]


def _predicate(case: WrapperCase) -> list[str]:
    d = case.device
    arg = {"tensor": f"torch.ones(2, device={d!r})", "device": f"torch.device({d!r})",
           "device_type": repr(d)}[case.wrapper.takes]
    return [f"x = {arg}", "seen.look('its answer outside any region', decl.answers(x))",
            f"with torch.autocast({d!r}, dtype={case.amp_dtype}):",
            "    seen.look('its answer inside a region', decl.answers(x))"]


def _within(case: WrapperCase, where: str, lines: list[str]) -> list[str]:
    """``lines`` in a region of the case's dtype, or outside any."""
    if where == OUTSIDE:
        return lines
    return [f"with torch.autocast({case.device!r}, dtype={case.amp_dtype}):",
            *("    " + line for line in lines)]


def _island(case: WrapperCase, where: str) -> list[str]:
    d = case.device
    dtype = case.amp_dtype if where == IN_A_REGION else torch.float32
    return [
        "from amp_conformance.checks.wrappers.island import Raised, Trace",
        f"island = decl.island({d!r})",
        f"x = [t.to({dtype}) if t.is_floating_point() else t for t in decl.inputs({d!r})]",
        *_within(case, where, [
            f"with Trace() as trace, Looking(seen, '{where}, inside the island'):",
            "    out = island(*x)",
            f"seen.look('{where}, what it computed in', computed(trace, out))",
            f"seen.look('{where}, after the island')",
            "try:", "    with Trace(raise_first=True):  # raises at its first computing op",
            "        island(*x)", "except Raised:", "    pass",
            f"seen.look('{where}, after an op inside the island raised')"])]


def _forward(case: WrapperCase, where: str) -> list[str]:
    d, w = case.device, case.wrapper
    sent = torch.float32 if w.cast_dtype != torch.float32 else case.amp_dtype
    return [
        "def forward(x, fail=False):",
        f"    seen.look('inside the forward', (x.dtype, (torch.is_autocast_enabled({d!r}), "
        f"torch.get_autocast_dtype({d!r}))))",
        "    if fail:", "        raise RuntimeError", "    return x * 2",
        f"f, x = decl.decorate(forward), torch.ones(2, 2, device={d!r}).to({sent})",
        *_within(case, where, [
            f"with Looking(seen, '{where}, in the decorated forward'):", "    f(x)",
            f"seen.look('{where}, after the forward')", "try:",
            f"    with Looking(seen, '{where}, in the decorated forward that raises'):",
            "        f(x, fail=True)", "except RuntimeError:", "    pass",
            f"seen.look('{where}, after the forward raised')"])]


def reproduction(case: WrapperCase, other: str, setting: tuple[bool, torch.dtype],
                 point: str) -> list[str]:
    """The lines that run the wrapper with ``other``'s autocast state at ``setting``
    through the part of the check's sequence that holds ``point``, printing at each point."""
    enabled, dtype = setting
    where = OUTSIDE if point.startswith(OUTSIDE) else IN_A_REGION
    body = {"region": lambda: _region(case), "runner": lambda: _runner(case),
            "swap": lambda: _swap(case), "predicate": lambda: _predicate(case),
            "island": lambda: _island(case, where),
            "forward": lambda: _forward(case, where)}[case.kind]()
    names = "Looking, Shown, computed" if case.kind == "island" else \
        "Looking, Shown" if case.kind == "forward" else "Shown"
    return [f"from amp_conformance.checks.wrappers.other_devices import {names}",
            f"torch.set_autocast_enabled({other!r}, {enabled}); "
            f"torch.set_autocast_dtype({other!r}, {dtype})",
            f"seen = Shown({case.device!r}, {other!r})  # prints what the check compares at "
            "each point", *body]
