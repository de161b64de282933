"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.Predicate`.

A predicate answers whether autocast is on for its argument's device (a tensor of the
device, its ``torch.device`` or its device type). It must say no outside any region, yes
inside a region of either amp dtype, no again after it (``state``); no inside a disabled
region nested in an enabled one and yes once that one exits, yes inside a region of the
other dtype nested in one, and no where only another device's autocast is on (a predicate
reading CUDA's flag for CPU tensors, ``torch.is_autocast_enabled()`` without a device,
says yes there and no in its own region) (``nesting``). It changes no state.
"""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.declare import DEVICE, DEVICE_TYPE, tensor
from amp_conformance.checks.wrappers.island import target
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core.state import AutocastState, autocast_device_types


def argument(case: WrapperCase) -> Any:
    """What the predicate is called with: a float32 tensor of the device, or its device."""
    x = tensor(4, 4, device=case.device)
    takes = case.wrapper.takes
    return x.device if takes == DEVICE else x.device.type if takes == DEVICE_TYPE else x


def ask(case: WrapperCase, x: Any, where: str, want: bool, problems: list[str]) -> None:
    """Ask the predicate, note a wrong answer and any state it changed."""
    before = AutocastState.capture(case.device)
    got = case.wrapper.answers(x)
    if got is not want and got != want:
        problems.append(f"{where}: answered {got!r}, expected {want}")
    problems += [f"{where}, after it answered: {c}"
                 for c in before.diff(AutocastState.capture(case.device))]


def _repro(case: WrapperCase, *lines: str) -> list[str]:
    d = case.device
    arg = {"tensor": f"torch.ones(2, device={d!r})", "device": f"torch.device({d!r})",
           "device_type": repr(d)}[case.wrapper.takes]
    return [f"x = {arg}", "print(decl.answers(x))  # outside any region",
            f"with torch.autocast({d!r}, dtype={case.amp_dtype}):", *lines]


def check_state(case: WrapperCase) -> None:
    """No outside any region, yes inside a region of the case's dtype, no after it."""
    t, problems = target(case), []
    with kept(case.device):
        x = argument(case)
        ask(case, x, "outside any region", False, problems)
        with t.autocast(case.amp_dtype):
            ask(case, x, "inside the region", True, problems)
        ask(case, x, "after the region", False, problems)
    if problems:
        F.fail(case, F.PREDICATE, problems, _repro(case, "    print(decl.answers(x))"))


def check_nesting(case: WrapperCase) -> None:
    """No inside a disabled region nested in an enabled one, yes after it; yes inside a
    region of the other dtype nested in one; no where another device's autocast alone is
    on (switched on directly, as a region of a device absent here could not be entered)."""
    t, dev, amp, problems = target(case), case.device, case.amp_dtype, []
    with kept(dev):
        x = argument(case)
        with t.autocast(amp):
            with t.autocast(amp, enabled=False):
                ask(case, x, "inside a disabled region nested in an enabled one", False,
                    problems)
            ask(case, x, "after the disabled region", True, problems)
            with t.autocast(other_dtype(amp)):
                ask(case, x, "inside a nested region of the other dtype", True, problems)
        for other in (d for d in autocast_device_types() if d != dev):
            with kept(other):
                torch.set_autocast_enabled(other, True)
                torch.set_autocast_dtype(other, amp)
                ask(case, x, f"where only {other}'s autocast is on", False, problems)
    if problems:
        promise = F.PREDICATE_NESTED if any("disabled" in p for p in problems) else F.PREDICATE
        F.fail(case, promise, problems, _repro(
            case, f"    with torch.autocast({dev!r}, enabled=False):",
            "        print(decl.answers(x))",
            f"torch.set_autocast_enabled({'cpu' if dev == 'cuda' else 'cuda'!r}, True)",
            "print(decl.answers(x))  # another device's autocast alone is on"))
