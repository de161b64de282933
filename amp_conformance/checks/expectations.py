"""What an entry expects: output dtypes inside and outside autocast, the control's cast."""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.checks.case import Case
from amp_conformance.core.casting import map_tensors, promoted_floating, tensors_in, widest_eligible
from amp_conformance.schema import argspec


def _dtype_for(name: str, case: Case, args: tuple, kwargs: dict) -> torch.dtype | None:
    if name == "amp":
        return case.amp_dtype
    if name == "widest":
        return widest_eligible((args, kwargs), case.target.device)
    if name == "first":
        return first_floating((args, kwargs))
    if name in ("none", "error"):
        return None
    return argspec.DTYPES[name]


def first_floating(values: Any) -> torch.dtype | None:
    """The dtype of the first floating tensor in ``values`` (None: there is none)."""
    return next((t.dtype for t in tensors_in(values) if t.is_floating_point()), None)


def casts_back(case: Case) -> bool:
    """Whether the entry's kernel casts its output back to its first input's dtype."""
    expect = case.entry.expect
    return expect == "first" or isinstance(expect, tuple) and "first" in expect


def cast_back(control: Any, expected: Any) -> Any:
    """A control's floating outputs in the dtypes the entry expects of its kernel's (a kernel
    that casts its output back)."""
    if isinstance(expected, tuple):
        return tuple(cast_back(c, e) for c, e in zip(control, expected, strict=False))
    return map_tensors(lambda t: t.to(expected) if t.is_floating_point() and isinstance(
        expected, torch.dtype) else t, control)


def expected_inside(case: Case, args: tuple, kwargs: dict) -> Any:
    """The output dtype, or a tuple with one dtype per output tensor (mixed outputs)."""
    return _expected(case.entry.expect, case, args, kwargs)


def _expected(names: str | tuple[str, ...], case: Case, args: tuple, kwargs: dict) -> Any:
    if isinstance(names, tuple):  # one per output; a last ... leaves the rest unchecked
        return tuple(... if n == "..." else _dtype_for(n, case, args, kwargs) for n in names)
    return _dtype_for(names, case, args, kwargs)


def expected_outside(case: Case, args: tuple, kwargs: dict) -> Any:
    entry = case.entry
    if entry.expect_outside != "inputs":
        return _expected(entry.expect_outside, case, args, kwargs)
    if entry.policy == "builtin_promote":  # the same call: outside as inside, per output too
        return _expected(entry.expect, case, args, kwargs)
    return promoted_floating((args, kwargs))


def control_dtype(case: Case, args: tuple, kwargs: dict) -> torch.dtype | None:
    return _dtype_for(case.entry.cast, case, args, kwargs) if case.entry.cast != "none" else None
