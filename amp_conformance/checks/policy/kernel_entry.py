"""Kernel entry is part of the policy verdict: a call whose policy needs an Autocast kernel
must enter one of the device's.

Dtypes alone cannot tell a promote kernel from none at all: for the inputs ``cat``,
``stack`` or ``addcmul`` accept, builtin type promotion gives the same dtype as autocast's
promote policy, so a backend with no autocast kernel for them passes every dtype check.
The policy check therefore also observes, through the dispatcher
(:mod:`amp_conformance.core.dispatch`), whether each variant's call entered an
``Autocast<Device>`` kernel, and fails naming the op and the key when it did not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from amp_conformance.core import devices
from amp_conformance.core.dispatch import shared_observer

#: the policies that exist only through an Autocast kernel (builtin_promote is the one
#: whose point is that autocast does nothing)
NEEDS_KERNEL = frozenset({"lower", "fp32", "fp32_opt_dtype", "promote", "banned"})


def entered(case: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> list[str] | None:
    """The Autocast overloads a call of ``fn`` enters (None: the entry's policy needs none).

    A call of its own, whose result is dropped: the observing kernel passes each call on by
    calling the op again, which skips a kernel registered from Python at the Autocast key
    (a vendor's Python autocast), so the call whose outputs are checked is never observed.
    Whether the call reaches an Autocast kernel is decided before that kernel runs.
    """
    if case.entry.policy not in NEEDS_KERNEL:
        return None
    with shared_observer(case.target.device).recording() as seen:
        with contextlib.suppress(Exception):  # only whether the kernel was reached matters
            fn(*args, **kwargs)
    return seen


def problems(case: Any, entered: dict[str, list[str] | None]) -> list[str]:
    """One line per variant whose call entered none of the device's Autocast kernels."""
    key = devices.dispatch_key(case.target.device)
    return [
        f"{name} entered no {key} kernel: the {case.entry.policy} policy of "
        f"{case.entry.qualname} is autocast's to apply, but the call never reached the device's "
        f"autocast (the dtypes may still look right: builtin type promotion can mimic promote)"
        for name, seen in entered.items() if seen is not None and not seen
    ]
