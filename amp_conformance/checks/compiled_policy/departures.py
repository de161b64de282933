"""PyTorch's own departures met by the compiled tier, judged like the eager checks judge an
entry's ``reference_defect`` (:mod:`amp_conformance.checks.defects`).

- The entry's ``reference_defect`` says PyTorch raises for these inputs today, and eager
  raised that error: the compiled call must raise it too (dynamo wraps it in an exception
  of its own whose message carries it) or give the dtypes the contract intends.
- The entry's ``compiled_defect`` says that with some backends the compiled call gives
  other dtypes than eager: with one of those backends, a compiled call with eager's dtypes
  and values passes (it fixes the defect), and so does one with the defect's dtypes and
  eager's shapes (it reproduces it; values in other dtypes are not compared). Any other
  backend must agree with eager, as for every entry.

Each returns the problems (empty: the device did what it names) for the caller to fail
with; the item records which behaviour it showed, and the report lists it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from amp_conformance.checks import defects
from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import expected_inside
from amp_conformance.checks.reproduction import _dtype_problems
from amp_conformance.core.casting import tensors_in
from amp_conformance.core.errors import chain
from amp_conformance.schema.defects import DefectUse
from amp_conformance.schema.fields import CompiledDefect


def eager_raised(case: Case, exc: BaseException) -> DefectUse | None:
    """The entry's active reference defect whose error eager raised, or None (the error is
    then a failure of its own)."""
    use = defects.active(case)
    if use is None or use.expect != "error" or not use.error:
        return None
    return use if str(exc).startswith(use.error) else None


def raised_the_defect(use: DefectUse | CompiledDefect, exc: BaseException) -> bool:
    """Whether the compiled call raised the defect's error (dynamo's TorchRuntimeError
    quotes the error of the fake-tensor call it wraps; a backend's BackendCompilerFailed
    is raised from it)."""
    return bool(use.error) and any(use.error in str(e) for e in chain(exc))


def contract_problems(case: Case, variant: str, actual: Any) -> list[str]:
    """Where a compiled call that ran departs from the contract's dtypes (``expect``)."""
    args, kwargs = case.build_inputs()
    return _dtype_problems(variant, actual, expected_inside(case, args, kwargs), "compiled")


def compiled_defect(case: Any) -> CompiledDefect | None:
    """The entry's compiled-tier defect where it applies to the case's backend and the
    running torch, else None."""
    departure = case.entry.compiled_defect
    return departure if departure is not None and departure.applies(case.backend) else None


def today_problems(case: Case, variant: str, departure: CompiledDefect, actual: Any,
                   expected: Any) -> list[str]:
    """Where the compiled call departs from what PyTorch's compiled call gives today: the
    defect's dtypes, eager's shapes."""
    today = replace(case, entry=replace(case.entry, expect=departure.expect))
    args, kwargs = case.build_inputs()
    problems = _dtype_problems(variant, actual, expected_inside(today, args, kwargs),
                               "compiled")
    shapes = [tuple(t.shape) for t in tensors_in(actual)]
    if shapes != [tuple(t.shape) for t in tensors_in(expected)]:
        problems.append(f"{variant} compiled: output shapes {shapes}, eager gave "
                        f"{[tuple(t.shape) for t in tensors_in(expected)]}")
    return problems
