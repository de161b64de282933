"""Inside autocast every variant of an op-list entry gives the expected dtypes, enters the
device's Autocast kernel where the policy is autocast's to apply, and the variants agree; a
banned op raises its error. Raises :class:`ConformanceFailure` naming the op, entry, device
and autocast dtype, expected and actual dtypes, and a reproduction."""

from __future__ import annotations

import re

import torch

from amp_conformance.checks import fake_casts
from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import expected_inside
from amp_conformance.checks.policy import kernel_entry
from amp_conformance.checks.reproduction import _dtype_problems, _fail, callables
from amp_conformance.core import devices
from amp_conformance.core.casting import output_dtypes, settle
from amp_conformance.core.compare import compare, compare_meta
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.state import unchanged_autocast_state


def check_policy(case: Case, observed: dict | None = None) -> None:
    """Inside autocast: every variant gives the expected dtype and the variants agree.

    ``observed``, when given, receives what each variant did (output dtypes or the error),
    for reports and drift between torch versions, whether the check passes or not.
    """
    observed = {} if observed is None else observed
    dev = case.target.device
    found = callables(case)
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

