"""Run one op-list entry on a target and check what autocast did to it.

Each ``check_*`` function raises :class:`ConformanceFailure` with a message naming the
op, entry, device and autocast dtype, expected and actual dtypes, and a short
copy-paste reproduction; they return normally when the behaviour conforms.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch

from amp_conformance.checks import fake_casts, kernel_entry
from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import control_dtype, expected_inside, expected_outside
from amp_conformance.checks.reproduction import _dtype_problems, _fail, describe
from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast, output_dtypes, settle
from amp_conformance.core.compare import compare, compare_meta
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.schema.oplist import variants


def _variants(case: Case) -> list[tuple[str, Any]]:
    found = variants(case.entry)
    if not found:
        raise ConformanceFailure(f"{describe(case)}: no callable found for {case.entry.qualname}")
    return found


def check_policy(case: Case, observed: dict | None = None) -> None:
    """Inside autocast: every variant gives the expected dtype and the variants agree.

    ``observed``, when given, receives what each variant did (output dtypes or the error),
    for reports and drift between torch versions, whether the check passes or not.
    """
    observed = {} if observed is None else observed
    dev = case.target.device
    found = _variants(case)
    with unchanged_autocast_state(dev, f"the policy check of {case.entry.qualname}"):
        with case.target.tensors():
            args, kwargs = case.build_inputs()
            if case.entry.policy == "banned":
                _check_banned(case, found, args, kwargs, observed)
                return
            expected = expected_inside(case, args, kwargs)
            outputs, entered = [], {}
            with case.target.autocast(case.amp_dtype):
                if not torch.is_autocast_enabled(dev):
                    _fail(case, ["autocast is not enabled inside the region"], found[0][0], expected)
                for name, fn in found:
                    try:
                        outputs.append((name, fake_casts.call(case, name, fn, args, kwargs)))
                    except fake_casts.FailedAfterCast as after:  # --fake: casts were right
                        observed[name] = after.observed
                    except fake_casts.FakeTierLimit:
                        raise
                    except fake_casts.NotCast as exc:
                        observed[name] = f"error: {exc}"
                        _fail(case, exc.problems, name, expected)
                    except Exception as exc:  # e.g. a kernel that did not cast: name the op
                        first = first_line(exc)
                        observed[name] = f"error: {first}"
                        _fail(case, [f"{name} raised inside autocast: {type(exc).__name__}: "
                                     f"{first}"], name, expected)
                    entered[name] = kernel_entry.entered(case, fn, args, kwargs)
            problems = []
            for name, out in outputs:
                observed[name] = [devices.dtype_name(d) for d in output_dtypes(out)]
                problems += _dtype_problems(name, out, expected, "inside autocast")
            problems += kernel_entry.problems(case, entered)
            if problems:
                _fail(case, problems, (outputs or found)[0][0], expected)
            if not outputs:  # --fake: every variant raised a limit of the fake tier after its casts
                return
            (first, out0), rest = outputs[0], outputs[1:]
            for name, out in rest:
                what = f"{name} disagrees with {first} inside autocast"
                try:
                    if case.target.has_values:
                        compare(out, out0, case.numerics, case.entry.tolerance, what)
                    else:
                        compare_meta(out, out0, what)
                except ConformanceFailure as exc:
                    _fail(case, [str(exc)], name, expected)


def _check_banned(case: Case, found, args, kwargs, observed: dict) -> None:
    pattern = re.escape(case.entry.error or "")
    for name, fn in found:
        with case.target.autocast(case.amp_dtype):
            try:
                out = settle(fn(*args, **kwargs))
                observed[name] = [devices.dtype_name(d) for d in output_dtypes(out)]
            except RuntimeError as exc:
                observed[name] = f"error: {first_line(exc)}"
                if not re.search(pattern, str(exc)):
                    _fail(case, [f"{name} raised {first_line(exc)!r}, "
                                 f"expected {case.entry.error!r}"], name, None)
            else:
                _fail(case, [f"{name} ran inside autocast; a banned op must raise "
                             f"{case.entry.error!r}"], name, None)
        try:
            fn(*args, **kwargs)
        except RuntimeError as exc:
            _fail(case, [f"{name} raised outside autocast: {exc}"], name, None, region="outside")


def check_numerics(case: Case) -> None:
    """The autocast output equals a control run with autocast off on hand-cast inputs."""
    dev = case.target.device
    name, fn = _variants(case)[0]
    with unchanged_autocast_state(dev, f"the numerics check of {case.entry.qualname}"):
        args, kwargs = case.build_inputs()
        cast_to = control_dtype(case, args, kwargs)
        expected = expected_inside(case, args, kwargs)
        with case.target.autocast(case.amp_dtype):
            out = fn(*args, **kwargs)
            with case.target.autocast(case.amp_dtype, enabled=False):
                if torch.is_autocast_enabled(dev):
                    _fail(case, ["autocast(enabled=False) left autocast enabled"], name, expected)
                if cast_to is None:
                    control = fn(*args, **kwargs)
                else:
                    control = fn(*hand_cast(args, cast_to, dev), **hand_cast(kwargs, cast_to, dev))
            if not torch.is_autocast_enabled(dev):
                _fail(case, ["autocast is off after leaving a nested enabled=False region"],
                      name, expected)
        try:
            compare(out, control, case.numerics, case.entry.tolerance,
                    f"{name} under autocast vs control on inputs cast to {cast_to}")
        except ConformanceFailure as exc:
            _fail(case, [str(exc)], name, expected)


def check_outside(case: Case) -> None:
    """Outside autocast the call runs in its input dtypes, untouched."""
    dev = case.target.device
    found = _variants(case)
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


def check_legacy(case: Case) -> None:
    """torch.<device>.amp.autocast(dtype=...) gives what torch.autocast gives, and warns."""
    dev = case.target.device
    legacy = devices.legacy_autocast(dev)
    name, fn = _variants(case)[0]
    with unchanged_autocast_state(dev, f"the legacy entry point check of {case.entry.qualname}"):
        args, kwargs = case.build_inputs()
        with case.target.autocast(case.amp_dtype):
            reference = fn(*args, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            region = legacy(dtype=case.amp_dtype)
            with region:
                out = fn(*args, **kwargs)
        if not any(issubclass(w.category, FutureWarning) and "is deprecated" in str(w.message)
                   for w in caught):
            _fail(case, [f"torch.{dev}.amp.autocast(...) emitted no FutureWarning about its "
                         "deprecation"], name, None)
        expected = output_dtypes(reference)
        if output_dtypes(out) != expected:
            _fail(case, [f"{name} under torch.{dev}.amp.autocast(dtype={case.amp_dtype}): output "
                         f"dtype {output_dtypes(out)}, torch.autocast gave {expected}"],
                  name, expected[0] if expected else None)
        try:
            compare(out, reference, case.numerics, case.entry.tolerance,
                    f"{name} under torch.{dev}.amp.autocast vs torch.autocast")
        except ConformanceFailure as exc:
            _fail(case, [str(exc)], name, None)
