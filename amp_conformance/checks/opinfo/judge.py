"""One sample form, judged: the device's autocast against the reference autocast.

The sample runs twice with the same seed: inside the device's autocast (observed: which
policy overloads it enters) and with autocast off through the reference autocast (the
declared policy applied in Python: the hand-cast control). What the call is follows from
what it entered: a **policy** op (its own overload first), a **composite** reaching policy
ops through its decomposition (named), or **left alone** (none: the control is then eager
itself). How it ended:

- ``agrees``: the same output dtypes and values (bitwise, or the documented tolerances
  with ``--numerics close``; dtypes and shapes alone on fake tensors). Where the control
  does not reproduce its own values (uninitialised memory: ``empty_like``), dtypes and
  shapes alone, and the verdict says so;
- ``capability``: both raise the same error, and the call runs outside autocast: the
  policy's cast reaches a kernel the device does not have in that dtype;
- ``defect``: the device does what a recorded PyTorch departure says it does today;
- ``n/a``: the sample fails outside autocast too, or cannot be built here;
- ``failed``: anything else, with both accounts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks.opinfo import calls, source
from amp_conformance.checks.reference import PolicyTable, ReferenceBanned, casting
from amp_conformance.core import devices
from amp_conformance.core.casting import output_dtypes, settle
from amp_conformance.core.compare import compare, compare_meta
from amp_conformance.core.dispatch import shared_observer
from amp_conformance.core.errors import ConformanceFailure, describe_error, first_line
from amp_conformance.core.target import Target
from amp_conformance.schema.departures import Departure, Incomparable

AGREES, CAPABILITY, DEFECT, NOT_APPLICABLE, FAILED = (
    "agrees", "capability", "defect", "n/a", "failed")
OUTCOMES = (AGREES, CAPABILITY, DEFECT, NOT_APPLICABLE, FAILED)
POLICY, COMPOSITE, ALONE = "policy op", "composite", "left alone"
KINDS = (POLICY, COMPOSITE, ALONE)


@dataclass(frozen=True)
class Verdict:
    """How one sample form ended, what the call was, and what it entered."""

    form: calls.Form
    outcome: str
    kind: str | None = None
    #: the policy overloads the call entered under the device's autocast, in call order
    entered: tuple[str, ...] = ()
    detail: str = ""
    #: the output dtypes inside autocast (the atlas shows them)
    dtypes: tuple[str, ...] = ()
    defect: str | None = None


@dataclass(frozen=True)
class Run:
    """A call's output, or the exception it raised."""

    out: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def run(fn: Callable[[], Any], device: str, fake: bool) -> Run:
    """``fn()`` with the fixed seed (the generators of the device it runs on: cpu for a fake
    one), the global RNG left as it was, warnings silenced."""
    with source.seeded("cpu" if fake else device), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return Run(settle(fn()))
        except Exception as exc:  # noqa: BLE001 - every error is judged, none hidden
            return Run(error=exc)


def kind_of(op: Any, entered: tuple[str, ...]) -> str:
    if not entered:
        return ALONE
    names = {getattr(op, "aten_name", None) or op.name.replace(".", "_"), op.name.rpartition(".")[2]}
    return POLICY if entered[0].partition("::")[2].partition(".")[0] in names else COMPOSITE


def _dtypes(out: Any) -> tuple[str, ...]:
    return tuple(devices.dtype_name(d) for d in output_dtypes(out))


def _values_agree(inside: Any, control: Any, numerics: str, tolerance: Any,
                  fake: bool) -> str | None:
    """Why the outputs differ, or None."""
    try:
        if fake:
            compare_meta(inside, control, "output")
        else:
            compare(_nan_safe(inside), _nan_safe(control), numerics, tolerance, "output")
    except ConformanceFailure as exc:
        return str(exc)
    return None


def _nan_safe(value: Any) -> Any:
    """Python floats as 0-dim tensors, so a NaN scalar compares equal to itself."""
    if isinstance(value, float) and math.isnan(value):
        return torch.tensor(value, dtype=torch.float64)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_nan_safe(v) for v in value)
    return value


@dataclass(frozen=True)
class Setting:
    """What every sample of one item is judged against."""

    ref: source.OpRef
    op: Any
    target: Target
    amp_dtype: torch.dtype
    numerics: str
    table: PolicyTable
    departures: tuple[Departure, ...] = ()
    #: the op's forms whose output values are not compared (dtypes and shapes are), and why
    incomparable: tuple[Incomparable, ...] = ()
    tolerance: Any = None

    def not_compared(self, form: calls.Form) -> str | None:
        """Why ``form``'s values are not compared here, or None."""
        return next((x.reason for x in self.incomparable
                     if x.covers(self.target.device, form.noncontiguous)), None)


def judge(s: Setting, form: calls.Form, call: calls.Call) -> Verdict:
    """One sample form: inside the device's autocast, against the reference control."""
    device, fake = s.target.device, s.target.fake
    observer = shared_observer(device)
    with observer.recording() as seen:
        def inside() -> Any:
            with s.target.autocast(s.amp_dtype):
                return call(s.op)
        a = run(inside, device, fake)
    entered = tuple(dict.fromkeys(seen))
    kind = kind_of(s.op, entered)
    with casting(s.table) as cast_at:
        c = run(lambda: call(s.op), device, fake)
    verdict = dict(form=form, kind=kind, entered=entered,
                   dtypes=_dtypes(a.out) if a.ok else ())
    if a.ok and c.ok:
        return _both_ran(s, call, a, c, verdict)
    if not a.ok:
        departure = next((d for d in s.departures if d.matches(s.target, s.amp_dtype, a.error)), None)
        if departure is not None:
            return Verdict(outcome=DEFECT, defect=departure.defect, **verdict,
                           detail=f"reproduces {departure.defect}: {describe_error(a.error, 160)}")
        defect = _defect_error(s, entered, a.error)
        if defect is not None:
            return Verdict(outcome=DEFECT, defect=defect, **verdict,
                           detail=f"reproduces {defect}: {describe_error(a.error, 160)}")
    if isinstance(c.error, ReferenceBanned):
        return _banned(a, c, verdict)
    eager = run(lambda: call(s.op), device, fake)
    if not eager.ok:
        return Verdict(outcome=NOT_APPLICABLE, **verdict,
                       detail=f"fails outside autocast too: {describe_error(eager.error, 160)}")
    return _one_or_both_raised(a, c, tuple(dict.fromkeys(cast_at)), verdict)


def _defect_error(s: Setting, entered: tuple[str, ...], error: BaseException) -> str | None:
    """A reference defect of an entered overload's entries whose error this is."""
    for name in entered:
        rule = s.table.rules.get(name)
        for use in rule.defects if rule is not None else ():
            if use.error and use.defect.applies() and use.error in str(error):
                return use.id
    return None


def _both_ran(s: Setting, call: calls.Call, a: Run, c: Run, verdict: dict) -> Verdict:
    reason = s.not_compared(verdict["form"])
    fake = s.target.fake or reason is not None
    why = _values_agree(a.out, c.out, s.numerics, s.tolerance, fake)
    if why is None:
        note = f"dtypes and shapes only: {reason}" if reason and not s.target.fake else ""
        return Verdict(outcome=AGREES, **verdict, detail=note)
    if not fake:  # is the control reproducible at all? (empty_like: uninitialised memory)
        with casting(s.table):
            again = run(lambda: call(s.op), s.target.device, fake)
        if again.ok and _values_agree(again.out, c.out, s.numerics, s.tolerance, fake):
            meta = _values_agree(a.out, c.out, s.numerics, s.tolerance, True)
            if meta is None:
                return Verdict(outcome=AGREES, **verdict,
                               detail="dtypes and shapes only: the control's values differ "
                                      "from run to run (uninitialised or nondeterministic)")
            why = meta
    where = (f"entered {', '.join(verdict['entered'])}" if verdict["entered"]
             else "entered no autocast kernel (autocast must leave it alone)")
    return Verdict(outcome=FAILED, **verdict,
                   detail=f"{where}; inside autocast {_dtypes(a.out)}, the declared policy's "
                          f"control {_dtypes(c.out)}: {_said(why)}")


def _said(why: str, limit: int = 300) -> str:
    """A comparison's failure in one line: its first line, and the next where the first
    only introduces it ("output: not equal (bitwise):" + "Tensor-likes are not equal!")."""
    lines = [line.strip() for line in why.splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else first_line(why)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _banned(a: Run, c: Run, verdict: dict) -> Verdict:
    expected = str(c.error)
    if a.ok:
        return Verdict(outcome=FAILED, **verdict,
                       detail=f"the op lists ban it under autocast ({first_line(expected, 120)}) "
                              "but it ran")
    if expected in str(a.error):
        return Verdict(outcome=AGREES, **verdict, detail="banned: raised its error")
    return Verdict(outcome=FAILED, **verdict,
                   detail=f"banned, but raised {describe_error(a.error, 160)} instead of "
                          f"{first_line(expected, 120)}")


def _one_or_both_raised(a: Run, c: Run, cast_at: tuple[str, ...], verdict: dict) -> Verdict:
    if not a.ok and not c.ok:
        if first_line(a.error) == first_line(c.error) and type(a.error) is type(c.error):
            return Verdict(outcome=CAPABILITY, **verdict,
                           detail=f"the policy's cast reaches a kernel that raises "
                                  f"{describe_error(a.error, 160)}")
        return Verdict(outcome=FAILED, **verdict,
                       detail=f"inside autocast: {describe_error(a.error, 160)}; the declared "
                              f"policy's control: {describe_error(c.error, 160)}")
    if not a.ok:
        return Verdict(outcome=FAILED, **verdict,
                       detail=f"works outside autocast, raises inside: {describe_error(a.error, 200)}")
    where = ", ".join(cast_at) or "no overload"
    return Verdict(outcome=FAILED, **verdict,
                   detail=f"runs inside autocast, but the declared policy (cast at {where}) "
                          f"raises {describe_error(c.error, 160)}: the device does not cast "
                          "where its op lists say")
