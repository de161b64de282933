"""The opt-in compiled tier (``--amp-compile BACKEND``): every op-list entry's policy check
run through torch.compile and compared with eager.

Each variant of an entry (the function, the Tensor method) is wrapped with its autocast
region and compiled whole (``fullgraph=True``: a graph break would run the op eagerly and
check nothing compiled). The compiled call must give eager's output dtypes and values:
bitwise for eager/aot_eager (the same kernels run), within tolerances for a backend that
generates code (per-dtype defaults, or the entry's ``tolerance``). On a real device the
region is inside the compiled function, so dynamo traces it and AOTAutograd lowers it;
under ``--fake`` torch.autocast refuses the absent device, so the region (the device's
autocast state switched directly) is entered around the compiled call instead, and only
dtypes and shapes are compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from amp_conformance.checks import compiling as backends
from amp_conformance.checks.case import Case
from amp_conformance.checks.compiled_policy import departures
from amp_conformance.checks.defects import FIXED, PROPERTY, REPRODUCED, Record, record_of
from amp_conformance.checks.reproduction import _call_source, describe
from amp_conformance.core import devices
from amp_conformance.core.casting import output_dtypes
from amp_conformance.core.compare import compare_meta
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.schema import argspec
from amp_conformance.schema.defects import DefectUse
from amp_conformance.schema.oplist import variants

CHECK = "compiled_policy"
NOT_GIVEN = "not applicable: --amp-compile not given (the compiled tier is opt-in)"


@dataclasses.dataclass(frozen=True)
class CompiledCase(Case):
    """A case of the compiled tier: the backend is part of the case and of its id, and
    ``numerics`` is how this backend's results compare with eager's."""

    backend: str | None = None

    @classmethod
    def of(cls, case: Case, backend: str | None) -> CompiledCase:
        numerics = case.numerics if backend is None else backends.numerics_for(
            backend, case.numerics)
        fields = {f.name: getattr(case, f.name) for f in dataclasses.fields(Case)}
        return cls(**{**fields, "numerics": numerics, "backend": backend})

    @property
    def id(self) -> str:
        dtype = devices.dtype_name(self.amp_dtype)
        return (f"{self.target.device}-{dtype}-{self.backend or 'none'}-"
                f"{self.entry.category}-{self.entry.id}")


def not_applicable(case: Any) -> str | None:
    """The registry's rule for the compiled tier (beyond the entry's own skips)."""
    backend = getattr(case, "backend", None)
    if backend is None:
        return NOT_GIVEN
    if case.entry.policy == "banned":
        return "not applicable: a banned op has no output under autocast to compare"
    if case.target.fake and backends.generates_code(backend):
        return (f"not applicable in --fake mode: backend {backend} generates code for "
                f"{case.target.device}, which is absent")
    return None


def _body(case: Case, fn: Callable) -> Callable:
    if case.target.fake:  # the region is entered around the call
        return lambda *args, **kwargs: fn(*args, **kwargs)
    device, dtype = case.target.device, case.amp_dtype

    def body(*args, **kwargs):
        with torch.autocast(device, dtype=dtype):
            return fn(*args, **kwargs)
    return body


def _run(case: Case, fn: Callable) -> Any:
    region = case.target.autocast(case.amp_dtype) if case.target.fake else nullcontext()
    with region:
        args, kwargs = case.build_inputs()  # fresh inputs: a call may write to them
        return fn(*args, **kwargs)


def reproduction(case: CompiledCase, variant: str) -> str:
    e, dev = case.entry, case.target.device
    args = ", ".join(argspec.render(s, dev, case.amp_dtype) for s in e.args)
    kwargs = ", ".join(f"{k!r}: {argspec.render(s, dev, case.amp_dtype)}"
                       for k, s in e.kwargs.items())
    lines = [
        "import torch",
        f"g = torch.Generator().manual_seed({case.seed})",
        f"args = ({args}{',' if len(e.args) == 1 else ''})",
        f"kwargs = {{{kwargs}}}",
        "def body(*args, **kwargs):",
        f"    with torch.autocast({dev!r}, dtype={case.amp_dtype}):",
        f"        return {_call_source(e, variant)}",
        f"compiled = torch.compile(body, backend={case.backend!r}, fullgraph=True)",
        "print(compiled(*args, **kwargs), body(*args, **kwargs))",
    ]
    if case.target.fake:
        lines.insert(0, "# fake: inside FakeTensorMode(allow_non_fake_inputs=True), the region "
                        "switched on around the compiled call (torch.set_autocast_enabled/_dtype)")
    return "\n".join("    " + line for line in lines)


def _fail(case: CompiledCase, variant: str, problem: str) -> None:
    raise ConformanceFailure(
        f"compiled_policy: {describe(case)}, compiled with backend {case.backend}:\n"
        f"  {variant}: {problem}\n  reproduce:\n{reproduction(case, variant)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _compiled_call(case: CompiledCase, body: Callable) -> tuple[Any, Exception | None, int]:
    """The body compiled whole and called: (output, exception, graphs dynamo compiled)."""
    with backends.compiling() as stats:
        compiled = torch.compile(body, backend=case.backend, fullgraph=True, dynamic=False)
        try:
            return _run(case, compiled), None, stats.graphs
        except Exception as exc:  # a compile error, a kernel the backend lacks, a defect
            return None, exc, stats.graphs


def _eager_raised(case: CompiledCase, variant: str, body: Callable,
                  use: DefectUse) -> dict[str, Any]:
    """Eager raised the error of the entry's reference defect: the compiled call must raise
    it too (reproduced) or give the contract's dtypes (fixed)."""
    actual, error, _ = _compiled_call(case, body)
    eager = (f"eager (not compiled) raised {use.error!r}, as PyTorch does today (reference "
             f"defect {use.defect.cite()})")
    if error is not None:
        if departures.raised_the_defect(use, error):
            return record_of(use.id, REPRODUCED)
        _fail(case, variant, f"{eager}; compiled raised {_first_line(error)}")
    problems = departures.contract_problems(case, variant, actual)
    if problems:
        _fail(case, variant, f"{eager}; compiled ran, not as the contract intends: "
                             f"{'; '.join(problems)}")
    return record_of(use.id, FIXED)


def check_variant(case: CompiledCase, variant: str, fn: Callable) -> dict[str, Any] | None:
    """One variant compiled vs eager: it compiles whole, then dtypes and values agree, or
    it does what a reference defect of the entry says PyTorch does today
    (:mod:`~amp_conformance.checks.compiled_policy.departures`); returns that defect's record."""
    body = _body(case, fn)
    try:
        expected = _run(case, body)
    except Exception as exc:  # the policy check reports this; nothing to compare with
        use = departures.eager_raised(case, exc)
        if use is None:
            _fail(case, variant, f"eager (not compiled) raised {_first_line(exc)}")
        return _eager_raised(case, variant, body, use)
    actual, error, graphs = _compiled_call(case, body)
    if error is not None:
        departure = departures.compiled_defect(case)
        if departure is not None and departures.raised_the_defect(departure, error):
            return record_of(departure.id, REPRODUCED)
        _fail(case, variant, f"failed compiled, where eager ran: {_first_line(error)}")
    if graphs == 0:
        blocked = backends.compiles_nothing()
        if blocked:
            raise NotApplicable(blocked)
        _fail(case, variant, "dynamo compiled no graph: the call ran eagerly")
    departure = departures.compiled_defect(case)
    if output_dtypes(actual) != output_dtypes(expected):
        problem = (f"compiled output dtypes {output_dtypes(actual)}, eager gave "
                   f"{output_dtypes(expected)}")
        if departure is None or departure.expect == "error":
            _fail(case, variant, problem)
        today = departures.today_problems(case, variant, departure, actual, expected)
        if today:
            _fail(case, variant, f"{problem}; nor is it what PyTorch's compiled call gives "
                                 f"today, reference defect {departure.defect.cite()}: "
                                 f"{'; '.join(today)}")
        return record_of(departure.id, REPRODUCED)
    what = f"compiled ({case.backend}) vs eager"
    try:
        if case.target.has_values:
            backends.compare_outputs(actual, expected, case.backend, case.numerics,
                                     case.entry.tolerance, what)
        else:
            compare_meta(actual, expected, what)
    except ConformanceFailure as exc:
        _fail(case, variant, str(exc))
    return None if departure is None else record_of(departure.id, FIXED)


def check_compiled_policy(case: CompiledCase, record: Record | None = None) -> None:
    """Every variant of the entry, compiled with the case's backend, agrees with eager (or
    does what PyTorch does today where the entry records a defect: ``record`` receives
    which, as the eager checks record it)."""
    found = variants(case.entry)
    if not found:
        raise ConformanceFailure(f"{describe(case)}: no callable found for {case.entry.qualname}")
    met = []
    with unchanged_autocast_state(case.target.device,
                                  f"the compiled policy check of {case.entry.qualname}"):
        with case.target.tensors():
            for name, fn in found:
                met.append(check_variant(case, name, fn))
    met = [m for m in met if m is not None]
    if met and record is not None:  # reproduced by any variant is what the item shows
        record(PROPERTY, next((m for m in met if m["status"] == REPRODUCED), met[0]))
