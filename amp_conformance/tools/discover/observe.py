"""Observing what a device's autocast does to each reference entry, and classifying it."""


from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import expected_inside
from amp_conformance.checks.policy.kernel_entry import NEEDS_KERNEL
from amp_conformance.core import devices
from amp_conformance.core.casting import (
    hand_cast,
    output_dtypes,
    settle,
    tensors_in,
    widest_eligible,
)
from amp_conformance.core.compare import compare
from amp_conformance.core.dispatch import shared_observer
from amp_conformance.core.errors import ConformanceFailure, describe_error, first_line
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import Entry

#: the reference's policies in discover's vocabulary
REFERENCE_POLICY = {
    "lower": "lower", "fp32": "fp32", "fp32_opt_dtype": "fp32", "promote": "promote",
    "builtin_promote": "unchanged", "banned": "error",
}
#: observed policy -> the op-list policy its category carries
LIST_POLICY = {"lower": "lower", "fp32": "fp32", "promote": "promote", "unchanged": "builtin_promote",
               "error": "banned", "other": "builtin_promote"}



@dataclass(frozen=True)
class Observation:
    """What autocast did to one entry for one autocast dtype."""

    policy: str  # lower, fp32, promote, unchanged, error, other, not run
    dtypes: tuple[str, ...] = ()  # output dtypes inside autocast on the entry's inputs
    message: str = ""
    #: whether the outputs (or the error) are what the reference entry expects
    as_reference: bool = False
    #: output dtypes of the same call outside autocast (None where it raised)
    outside: tuple[str, ...] | None = None
    #: what discover could not confirm, for a human to look at
    review: str = ""
    #: whether the call inside autocast entered one of the device's Autocast kernels
    entered: bool | None = None
    #: what discover inferred beyond the dtypes (no review needed)
    remark: str = ""
    #: the first line of the error the call raised outside autocast, if it did
    outside_error: str = ""
    #: for an entry with a reference defect: "reproduced" (as PyTorch today) or "fixed"
    #: (as the contract intends), when the observation is one of the two
    defect: str = ""

    @property
    def ran(self) -> bool:
        return self.policy != "not run"


@dataclass
class Row:
    entry: Entry
    reference: str
    observed: dict[str, Observation] = field(default_factory=dict)

    @property
    def status(self) -> str:
        policies = {o.policy for o in self.observed.values()}
        if "not run" in policies:
            return "not run"
        if all((o.as_reference or o.policy == self.reference) and not o.review
               for o in self.observed.values()):
            return "same"
        return "differs"


# -- observing -----------------------------------------------------------------------



def _call(target: Target, fn: Any, args: tuple, kwargs: dict, amp_dtype: torch.dtype | None) -> Any:
    """The output of one call (inside autocast when amp_dtype is given), or the error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if amp_dtype is None:
                return settle(fn(*args, **kwargs))
            with target.autocast(amp_dtype):
                return settle(fn(*args, **kwargs))
    except Exception as exc:  # an op may raise anything; the error is what is observed
        return exc


def _dtypes(result: Any) -> Any:
    """The output dtypes of a call as a tuple (the error itself where it raised)."""
    return result if isinstance(result, Exception) else tuple(output_dtypes(result))


def _names(dtypes: tuple) -> tuple[str, ...]:
    return tuple(devices.dtype_name(d) for d in dtypes)


_CONTROL_CAST = {"lower": "amp", "fp32": "float32", "promote": "widest"}


def _values_differ(target: Target, fn: Any, args: tuple, kwargs: dict, policy: str,
                   amp_dtype: torch.dtype, inside: Any, outside: Any) -> bool:
    """Whether the autocast output differs (bitwise) from its control: autocast off, the
    eligible inputs cast by hand to the policy's dtype (or untouched, for unchanged)."""
    if not target.has_values:
        return False
    dev = target.device
    if policy == "unchanged":
        control = outside
    elif policy in _CONTROL_CAST:
        cast = {"amp": amp_dtype, "float32": torch.float32,
                "widest": widest_eligible((args, kwargs), dev)}[_CONTROL_CAST[policy]]
        control = _call(target, fn, hand_cast(args, cast, dev), hand_cast(kwargs, cast, dev), None)
    else:
        return False
    if isinstance(control, Exception):
        return False
    try:
        compare(inside, control, "bitwise", None, "discover")
    except (ConformanceFailure, AssertionError, RuntimeError):
        return True
    return False


def observe(entry: Entry, target: Target, amp_dtype: torch.dtype) -> Observation:
    """Run ``entry`` on ``target`` and classify what autocast did."""
    found = oplist.variants(entry)
    if not found:
        return Observation("not run", message=f"no callable {entry.qualname} in this torch")
    _, fn = found[0]
    dev = target.device
    case = Case(target, amp_dtype, entry)
    with unchanged_autocast_state(dev, f"discovering {entry.qualname}"), target.tensors():
        try:
            args, kwargs = case.build_inputs()
        except Exception as exc:  # inputs the device cannot hold
            return Observation("not run", message=f"inputs: {describe_error(exc)}")
        inside = _call(target, fn, args, kwargs, amp_dtype)
        with shared_observer(dev).recording() as entered:  # a call of its own: kernel entry
            _call(target, fn, args, kwargs, amp_dtype)
        outside = _call(target, fn, args, kwargs, None)
        if isinstance(inside, Exception):
            if isinstance(outside, Exception):
                return Observation("not run", message=f"raises outside autocast too: "
                                                      f"{describe_error(outside)}")
            today = _defect_error(entry, inside)
            return Observation("error", message=first_line(inside, 200),
                               as_reference=entry.policy == "banned" or today,
                               outside=_names(_dtypes(outside)),
                               defect="reproduced" if today else "")
        expected = expected_inside(case, args, kwargs)
        today = _defect_expected(case, args, kwargs)
        variants = {}
        for name, dtype in (("float32", torch.float32), ("amp", amp_dtype)):
            a, k = hand_cast(args, dtype, dev), hand_cast(kwargs, dtype, dev)
            variants[name] = (_dtypes(_call(target, fn, a, k, amp_dtype)),
                              _dtypes(_call(target, fn, a, k, None)))
        widest = widest_eligible((args, kwargs), dev)
        mixed = len({t.dtype for t in tensors_in((args, kwargs))
                     if t.is_floating_point() and t.dtype != torch.float64
                     and t.device.type == dev}) > 1
        policy = classify(_dtypes(inside), _dtypes(outside), variants, amp_dtype, widest, mixed)
        differ = _values_differ(target, fn, args, kwargs, policy, amp_dtype, inside, outside)
    review = ("values differ from the control with autocast off: autocast reaches only part "
              "of this op (e.g. kernels of its decomposition)") if differ else ""
    as_reference, defect, entered = _as_reference(expected, today, _dtypes(inside), entered)
    remark = ""
    if entry.policy in NEEDS_KERNEL and not entered:
        # the dtypes alone cannot tell promote from builtin promotion: the kernel decides
        as_reference = False
        review = f"entered no {devices.dispatch_key(dev)} kernel"
    elif policy == "unchanged" and entry.policy == "promote" and entered and as_reference:
        policy = "promote"
        remark = (f"promote cannot be told from builtin promotion for these inputs; the call "
                  f"entered the {devices.dispatch_key(dev)} kernel, so it is recorded as promote")
    return Observation(
        policy, _names(_dtypes(inside)), as_reference=as_reference,
        outside=None if isinstance(outside, Exception) else _names(_dtypes(outside)),
        outside_error=first_line(outside, 120) if isinstance(outside, Exception) else "",
        review=review, entered=bool(entered), remark=remark, defect=defect,
    )


def _as_reference(expected: Any, today: tuple[Any, bool] | None, got: tuple,
                  entered: list[str]) -> tuple[bool, str, list[str]]:
    """Whether dtypes ``got`` are the reference's; with an active reference defect, which
    behaviour they are ("fixed": the contract's, "reproduced": PyTorch's today). Where
    PyTorch today enters no Autocast kernel, a device reproducing that needs none."""
    as_reference = matches(expected, got)
    if today is None:
        return as_reference, "", entered
    defect = "fixed" if as_reference else "reproduced" if matches(today[0], got) else ""
    if defect == "reproduced" and not today[1]:
        entered = entered or ["(none, as PyTorch today)"]
    return bool(defect), defect, entered


def _defect_error(entry: Entry, error: Exception) -> bool:
    """Whether ``error`` raised inside autocast is what PyTorch raises today (a reference
    defect of the entry that the running torch still has)."""
    use = entry.reference_defect
    return bool(use and use.defect.applies() and use.expect == "error"
                and str(error).startswith(use.error or ""))


def _defect_expected(case: Case, args: tuple, kwargs: dict) -> tuple[Any, bool] | None:
    """What PyTorch gives today where the entry has an active reference defect whose
    behaviour is an output (not an error): the dtypes, and whether it enters a kernel."""
    use = case.entry.reference_defect
    if use is None or not use.defect.applies() or use.expect == "error":
        return None
    today = replace(case, entry=replace(case.entry, expect=use.expect))
    return expected_inside(today, args, kwargs), use.kernel


def classify(inside: tuple, outside: Any, variants: dict, amp_dtype: torch.dtype,
             widest: torch.dtype | None, mixed: bool) -> str:
    """The policy name for what was seen (see the module docstring)."""
    f32_in, f32_out = variants["float32"]
    amp_in, amp_out = variants["amp"]
    # each policy is "inside autocast, the call behaves as outside autocast on inputs cast
    # to X": that holds for complex and integer outputs too (fft, matrix_rank, polar)
    if _ok(f32_in) and f32_in != f32_out and (
            f32_in == amp_out or (f32_in[:1] == (amp_dtype,) and f32_out[:1] != (amp_dtype,))):
        return "lower"
    if _ok(amp_in) and amp_in != amp_out and (
            amp_in == f32_out or (amp_in[:1] == (torch.float32,) and amp_out[:1] != (torch.float32,))):
        return "fp32"
    if mixed and inside[:1] == (widest,) and outside != inside:
        return "promote"
    changed = any(_ok(i) and i != o for i, o in ((inside, outside), (f32_in, f32_out), (amp_in, amp_out)))
    return "other" if changed else "unchanged"


def matches(expected: Any, got: tuple) -> bool:
    """Whether output dtypes ``got`` are what the reference expects (as the policy check)."""
    if isinstance(expected, tuple):
        head = expected[:-1] if expected and expected[-1] is ... else expected
        return tuple(got[:len(head)]) == head and (head is not expected or len(got) == len(head))
    if expected is None:
        return not got
    return bool(got) and all(d == expected for d in got)


def _ok(result: Any) -> bool:
    return isinstance(result, tuple) and bool(result)


# -- writing -------------------------------------------------------------------------


