"""Outside autocast an op-list entry's call runs in its input dtypes, untouched (or raises
the error its list records where only autocast makes it run)."""

from __future__ import annotations

import re
from typing import Any

import torch

from amp_conformance.checks import fake_casts
from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import expected_outside
from amp_conformance.checks.reproduction import _dtype_problems, _fail, callables
from amp_conformance.core.casting import settle
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.state import unchanged_autocast_state


def check_outside(case: Case) -> None:
    """Outside autocast the call runs in its input dtypes, untouched."""
    dev = case.target.device
    found = callables(case)
    with unchanged_autocast_state(dev, f"the outside check of {case.entry.qualname}"):
        with case.target.tensors():
            args, kwargs = case.build_inputs()
            expected = expected_outside(case, args, kwargs)
            if torch.is_autocast_enabled(dev):
                _fail(case, ["autocast is enabled before any region was entered"], found[0][0],
                      expected, region="outside")
            for name, fn in found:
                if case.entry.expect_outside == "error":
                    _check_raises_outside(case, name, fn, args, kwargs)
                    continue
                out = _call_outside(case, fn, args, kwargs)
                problems = _dtype_problems(name, out, expected, "outside autocast")
                if problems:
                    _fail(case, problems, name, expected, region="outside")
                if case.target.has_values:
                    with case.target.autocast(case.amp_dtype, enabled=False):
                        disabled = fn(*args, **kwargs)
                    try:
                        # bitwise unless the run compares with tolerances (--numerics close,
                        # or a device that declares no bitwise reproducibility)
                        compare(disabled, out, case.numerics, case.entry.tolerance,
                                f"{name} in autocast(enabled=False) vs no region")
                    except ConformanceFailure as exc:
                        _fail(case, [str(exc)], name, expected, region="outside")


def _call_outside(case: Case, fn, args: tuple, kwargs: dict) -> Any:
    """The call outside autocast; under --fake, a limit of the fake tier (an op without a
    fake kernel in this torch reaching for the absent device) is a FakeTierLimit."""
    try:
        return settle(fn(*args, **kwargs))
    except Exception as exc:
        limit = fake_casts.not_applicable(exc) if case.target.fake else None
        if limit is None:
            raise
        raise limit from exc


def _check_raises_outside(case: Case, name: str, fn, args, kwargs) -> None:
    """The op has no kernel for its (lower-precision) inputs: only autocast makes it run.
    The message must match the entry's ``error_outside``, so that an unrelated error (a
    bad argument, a missing device) does not pass for the missing kernel."""
    pattern = case.entry.error_outside or ""
    try:
        settle(fn(*args, **kwargs))
    except (RuntimeError, NotImplementedError, AssertionError) as exc:
        if re.search(pattern, str(exc)):
            return
        limit = fake_casts.not_applicable(exc) if case.target.fake else None
        if limit is not None:
            raise limit from exc
        _fail(case, [f"{name} raised outside autocast {type(exc).__name__}: {first_line(exc)!r}, "
                     f"which does not match the error the op list records there "
                     f"(error_outside = {pattern!r})"], name, None, region="outside")
    _fail(case, [f"{name} ran outside autocast; the op list records that it raises there "
                 f"(no kernel for these input dtypes: {pattern!r})"], name, None, region="outside")

