"""The deprecated ``torch.<device>.amp.autocast`` gives what ``torch.autocast`` gives for an
op-list entry, and warns that it is deprecated."""

from __future__ import annotations

import warnings

from amp_conformance.checks.case import Case
from amp_conformance.checks.reproduction import _fail, callables
from amp_conformance.core import devices
from amp_conformance.core.casting import output_dtypes
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import unchanged_autocast_state


def check_legacy(case: Case) -> None:
    """torch.<device>.amp.autocast(dtype=...) gives what torch.autocast gives, and warns."""
    dev = case.target.device
    legacy = devices.legacy_autocast(dev)
    name, fn = callables(case)[0]
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

