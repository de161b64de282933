"""Mutants of the wrapper tier: broken library wrappers planted behind the declarations
``planted.region`` and ``planted.forward`` (:mod:`amp_conformance.tools.selftest.planted`).

Every mutant's run passes ``--wrapper amp_conformance.tools.selftest.planted:PLANTED``; the
baseline of that group runs the planted wrappers sound (torch.autocast and
torch.amp.custom_fwd/custom_bwd), and each mutant's ``apply`` plants one broken
implementation behind the same declaration. Each must be killed with a message naming the
wrapper and the promise it breaks (``checks/wrappers/failure.py``).
"""

from __future__ import annotations

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.tools.selftest import planted
from amp_conformance.tools.selftest.mutation import Mutant, register

OPTIONS = ("--wrapper", "amp_conformance.tools.selftest.planted:PLANTED")
REGION, FORWARD = "wrapper planted.region", "wrapper planted.forward"

register(Mutant(
    name="wrapper-leaks-dtype-after-exception",
    description="a region factory whose region restores the enabled flag but not the dtype "
                "when the body raises",
    apply=lambda: planted.plant(make=planted.leaky_region),
    expect=(REGION, F.RESTORED_EXCEPTION),
    select="test_wrapper_region and restored",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-never-clears-cache",
    description="a region factory whose outermost exit never clears the cast cache",
    apply=lambda: planted.plant(make=planted.uncleared_region),
    expect=(REGION, F.CACHE),
    select="test_wrapper_region and cache",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-casts-first-argument-only",
    description="a forward decorator that casts its first argument and leaves the other "
                "floating inputs (positional and keyword) uncast",
    apply=lambda: planted.plant(decorate=planted.first_arg_only),
    expect=(FORWARD, F.CASTS, "positional 1"),
    select="test_wrapper_forward and casts",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-autocast-on-inside",
    description="a forward decorator that casts its inputs but leaves autocast enabled "
                "inside the forward (declared disables_autocast=True)",
    apply=lambda: planted.plant(decorate=planted.autocast_on_inside),
    expect=(FORWARD, F.INSIDE),
    select="test_wrapper_forward and inside",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-backward-outside-forward-state",
    description="a forward decorator whose decorate_backward does nothing: backward runs "
                "in whatever state it is called in, not the forward's",
    apply=lambda: planted.plant(decorate_backward=planted.no_backward_state),
    expect=(FORWARD, F.BACKWARD),
    select="test_wrapper_forward and backward",
    options=OPTIONS,
))
