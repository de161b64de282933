"""The autocast output of an op-list entry equals a control run with autocast off on inputs
cast by hand (bitwise, or within tolerances)."""

from __future__ import annotations

import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import cast_back, casts_back, control_dtype, expected_inside
from amp_conformance.checks.reproduction import _fail, callables
from amp_conformance.core.casting import hand_cast
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import unchanged_autocast_state


def check_numerics(case: Case) -> None:
    """The autocast output equals a control run with autocast off on hand-cast inputs."""
    dev = case.target.device
    name, fn = callables(case)[0]
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
                if casts_back(case):  # the kernel casts its output back: the control too
                    control = cast_back(control, expected)
            if not torch.is_autocast_enabled(dev):
                _fail(case, ["autocast is off after leaving a nested enabled=False region"],
                      name, expected)
        try:
            compare(out, control, case.numerics, case.entry.tolerance,
                    f"{name} under autocast vs control on inputs cast to {cast_to}")
        except ConformanceFailure as exc:
            _fail(case, [str(exc)], name, expected)

