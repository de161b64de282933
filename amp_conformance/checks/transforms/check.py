"""The policy inside a ``torch.func`` transform is the policy outside it.

One item per (transform, op list): every entry of the list is called under autocast with
the transform and without it, and must give the same output dtypes and values (within
the entry's tolerance, or torch.testing's per-dtype defaults: a batching rule may run
another kernel, ``bmm`` for ``mm``). ``vmap`` maps over two samples of the entry's
arguments stacked; ``grad`` and ``jacrev`` differentiate the float32 sum of its outputs
with respect to its first floating input, the output itself kept as auxiliary. An entry
the transform cannot run at all (no batching rule, random, not differentiable) is a limit
of the transform. One that departs under it is excused only where the transform departs
the same way without autocast, on the entry's inputs cast by hand to the policy's dtype
(a dtype departure never by a value one), and under autocast agrees with that transformed
control: the entry is still checked for autocast, against it. Each excused entry and its
evidence is recorded on the item; an item whose every entry is excused or a limit is
skipped and says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import tomllib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import torch

from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.defects import FIXED, PROPERTY, REPRODUCED, record_of
from amp_conformance.checks.expectations import cast_back, casts_back, control_dtype, expected_inside
from amp_conformance.checks.reproduction import callables
from amp_conformance.core.casting import hand_cast, map_tensors, output_dtypes, settle, tensors_in
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import (
    EXCUSE_PROPERTY,
    ConformanceFailure,
    NotApplicable,
    describe_error,
    first_line,
    same_way,
)
from amp_conformance.core.target import Target
from amp_conformance.schema import argspec
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.oplist import OpListError, builtin_dir

FIXTURES = ("transform", "category")
TRANSFORMS = ("vmap", "grad", "jacrev")


class Limit(Exception):
    """The transform cannot run this call, with autocast or without."""


def categories(device: str, oplists: tuple[str, ...] = ()) -> list[str]:
    """The device's op lists with a policy to hold (not the banned list), in file order."""
    seen = {e.category: None for e in load_oplist(device, oplists).entries
            if e.policy != "banned"}
    return list(seen)


def params(metafunc: Any, settings: Any) -> list[Any]:
    return [pytest.param(t, c, id=f"{t}-{c}") for t in TRANSFORMS
            for c in categories(settings.device, settings.oplists)]


# -- one call, transformed and not ---------------------------------------------------


def _second_sample(case: Case) -> tuple:
    builder = argspec.Builder(case.target.device, case.amp_dtype, case.seed + 1)
    return tuple(builder.build(s) for s in case.entry.args)


def _vmap(case: Case, fn: Callable, args: tuple, kwargs: dict) -> list[tuple[Any, Any]]:
    """(transformed, untransformed) output per sample: vmap over both samples stacked."""
    other = _second_sample(case)
    in_dims = tuple(0 if isinstance(a, torch.Tensor) else None for a in args)
    if not any(d == 0 for d in in_dims):
        raise Limit("no tensor argument to map over")
    with case.target.autocast(enabled=False):  # the suite's step: no promote rule for stack
        stacked = [torch.stack([a, b]) if d == 0 else a
                   for a, b, d in zip(args, other, in_dims, strict=True)]
    call = functools.partial(fn, **kwargs)
    batched = _run(lambda: torch.func.vmap(call, in_dims=in_dims)(*stacked))
    unbatched = [tuple(t.shape) for t in tensors_in(batched) if t.dim() == 0 or t.shape[0] != 2]
    if unbatched:  # a sample of it cannot be read (PyTorch/XLA's runtime breaks on it)
        raise _Raised(RuntimeError(f"vmap gave an output of shape {unbatched[0]}, without the "
                                   "batch dimension of 2 first"))
    return [(map_tensors(lambda t, k=k: t[k], batched), _untransformed(lambda s=s: call(*s)))
            for k, s in enumerate((args, other))]


def _differentiate(transform: Callable, case: Case, fn: Callable, args: tuple,
                   kwargs: dict) -> list[tuple[Any, Any]]:
    """(transformed, untransformed) (gradient, output) of the float32 sum of the outputs
    with respect to the first floating argument: torch.func against torch.autograd."""
    index = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor)
                  and a.is_floating_point()), None)
    if index is None:
        raise Limit("no floating tensor argument to differentiate")

    def loss(x):
        out = fn(*args[:index], x, *args[index + 1:], **kwargs)
        floats = [t for t in tensors_in(out) if t.is_floating_point()]
        if not floats:
            raise Limit("no floating output to differentiate")
        return sum(t.float().sum() for t in floats), out

    transformed = _run(lambda: transform(loss, has_aux=True)(args[index]))

    def autograd():
        x = args[index].detach().requires_grad_()
        value, out = loss(x)
        if not value.requires_grad:
            raise Limit("the output does not depend on the input")
        return torch.autograd.grad(value, x)[0], out
    return [(transformed, _untransformed(autograd))]


def _run(thunk: Callable[[], Any]) -> Any:
    try:
        return settle(thunk())  # a lazy device's error belongs to this call
    except Limit:
        raise
    except Exception as exc:  # judged by departure: with autocast only, or a limit
        raise _Raised(exc) from None


def _untransformed(thunk: Callable[[], Any]) -> Any:
    """The control; where it raises, the op's own checks report it, not this one."""
    try:
        return settle(thunk())
    except Limit:
        raise
    except Exception as exc:
        raise Limit(f"the untransformed call raises {describe_error(exc, 160)}") from None


class _Raised(Exception):
    def __init__(self, exc: BaseException):
        super().__init__(describe_error(exc, 160))
        self.error = exc


class Excused(Exception):
    """The entry departs under the transform, and is shown to without autocast too: on its
    inputs cast by hand, the transformed call departs the same way, and under autocast it
    agrees with that transformed control."""


RUN = {"vmap": _vmap,
       "grad": functools.partial(_differentiate, lambda f, **k: torch.func.grad(f, **k)),
       "jacrev": functools.partial(_differentiate, lambda f, **k: torch.func.jacrev(f, **k))}


def _pairs(case: Case, transform: str, autocast: bool, by_hand: bool = False
           ) -> list[tuple[Any, Any]]:
    """(transformed, untransformed) per sample; ``by_hand``: the call on its eligible inputs
    cast by hand to the policy's dtype (autocast off), the control of the numerics check."""
    _, fn = callables(case)[0]
    args, kwargs = case.build_inputs()
    if by_hand:
        fn = _by_hand(case, fn, args, kwargs)
    with contextlib.ExitStack() as stack:
        if autocast:
            stack.enter_context(case.target.autocast(case.amp_dtype))
        else:  # a control: its warnings (deprecated ops under vmap's fallback) are nobody's
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
        return RUN[transform](case, fn, args, kwargs)


def _by_hand(case: Case, fn: Callable, args: tuple, kwargs: dict) -> Callable:
    cast_to, dev = control_dtype(case, args, kwargs), case.target.device
    expected = expected_inside(case, args, kwargs)

    def call(*a: Any, **k: Any) -> Any:
        out = fn(*a, **k) if cast_to is None else fn(*hand_cast(a, cast_to, dev),
                                                     **hand_cast(k, cast_to, dev))
        return cast_back(out, expected) if casts_back(case) else out
    return call


def _raises_untransformed(case: Case) -> str | None:
    """What the call raises under autocast untransformed (a reference defect's error, say),
    or None where it runs."""
    _, fn = callables(case)[0]
    args, kwargs = case.build_inputs()
    try:
        with case.target.autocast(case.amp_dtype):
            fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the op's own checks judge it
        return describe_error(exc, 160)
    return None


def departure(case: Case, transform: str) -> str | None:
    """What the transformed call under autocast does differently, or None. Limit where the
    transform cannot run the call at all; Excused where it departs the same way without
    autocast on inputs cast by hand and under autocast agrees with that transformed control
    (the op's own rule or gradient under the transform, not autocast's)."""
    tolerance = case.entry.tolerance or _TOLERANCE.get(case.amp_dtype)
    try:
        pairs = _pairs(case, transform, autocast=True)
    except _Raised as exc:
        untransformed = _raises_untransformed(case)
        if untransformed is not None:
            raise Limit(f"the untransformed call raises {untransformed} too") from None
        try:
            _pairs(case, transform, autocast=False, by_hand=True)
        except _Raised as plain:
            if same_way(exc.error, plain.error):
                raise Excused(f"raises {exc} under the transform without autocast too, on "
                              "inputs cast by hand") from None
            return f"raised {exc} under autocast; without autocast it raises {plain}"
        except Limit:
            pass
        return f"raised {exc} under autocast; without autocast on inputs cast by hand it runs"
    problem = _differs(pairs, transform, tolerance)
    if problem is None:
        return None
    try:
        control = _pairs(case, transform, autocast=False, by_hand=True)
    except (_Raised, Limit):
        return problem
    plain = _differs(control, transform, tolerance)
    if plain is None or _kind(plain) != _kind(problem):  # a value quirk excuses no dtype
        return problem
    against = _differs([(got, want) for (got, _), (want, _) in zip(pairs, control, strict=True)],
                       transform, tolerance)
    if against is not None:
        return (f"{problem}; against the same transformed call on inputs cast by hand without "
                f"autocast: {against}")
    raise Excused(f"departs without autocast too, on inputs cast by hand ({plain}); under "
                  "autocast it agrees with that transformed control")


def _kind(problem: str) -> str:
    return "dtype" if problem.startswith("output dtypes") else "value"


def _differs(pairs: list[tuple[Any, Any]], transform: str, tolerance: Any) -> str | None:
    """How the first (transformed, untransformed) pair that differs does, or None."""
    for k, (got, want) in enumerate(pairs):
        sample = f" (sample {k})" if transform == "vmap" else ""
        if output_dtypes(got) != output_dtypes(want):
            return f"output dtypes {_names(got)}, untransformed {_names(want)}{sample}"
        try:
            compare(got, want, "close", tolerance, "transformed vs untransformed")
        except ConformanceFailure as exc:
            return first_line(exc) + sample
    return None


#: values computed in the amp dtype along two paths (a batching rule, functorch's backward
#: formulas) agree to the amp dtype's precision, not to their float32 results'
_TOLERANCE = {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5},
              torch.float16: {"rtol": 1e-3, "atol": 1e-5}}


def _names(value: Any) -> list[str]:
    return [str(d).removeprefix("torch.") for d in output_dtypes(value)]


# -- PyTorch's own departures --------------------------------------------------------

KNOWN_FILE = "transforms.toml"


@dataclasses.dataclass(frozen=True)
class Known:
    """The entries whose policy PyTorch itself loses under a transform, and the defect:
    on every device, and on one device type only (``[<transform>.devices]``)."""

    defect: str
    entries: frozenset[str]
    devices: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)

    def on(self, device: str) -> frozenset[str]:
        return self.entries | self.devices.get(device, frozenset())


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(e, str) for e in value)


@functools.cache
def known() -> dict[str, Known]:
    """oplists/transforms.toml, by transform (OpListError names the file and field)."""
    path = builtin_dir() / KNOWN_FILE
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found = {}
    for transform, table in data.items():
        where = f"{path}: [{transform}]"
        if transform not in TRANSFORMS:
            raise OpListError(f"{where}: unknown transform (allowed: {', '.join(TRANSFORMS)})")
        if table.get("defect") not in defect_registry():
            raise OpListError(f"{where}: field 'defect' must name a defect of defects.toml, "
                              f"got {table.get('defect')!r}")
        if not _ids(table.get("entries")):
            raise OpListError(f"{where}: field 'entries' must be a list of entry ids")
        devices = table.get("devices", {})
        bad = [d for d, ids in devices.items() if not _ids(ids)] if isinstance(devices, dict) \
            else ["devices"]
        if bad:
            raise OpListError(f"{where}: field 'devices' must map device types to lists of "
                              f"entry ids, got {bad[0]!r}")
        found[transform] = Known(table["defect"], frozenset(table["entries"]),
                                 {d: frozenset(ids) for d, ids in devices.items()})
    return found


# -- the item ------------------------------------------------------------------------


def check_transform(target: Target, dtype: torch.dtype, transform: str, category: str,
                    oplists: tuple[str, ...] = (), numerics: str = "bitwise",
                    record: Callable[[str, Any], None] = lambda *_: None) -> None:
    """Every applicable entry of ``category`` under ``torch.func.<transform>``; an entry
    PyTorch itself departs on (``known()``) may do either, and the item records which."""
    cases = [Case(target, dtype, e, numerics) for e in load_oplist(target.device, oplists).entries
             if e.category == category]
    reference = known().get(transform)
    departures, limits, excused, met, ran = [], [], [], {REPRODUCED: [], FIXED: []}, 0
    for case in cases:
        if case.skip_reason("transforms") is not None:
            continue
        try:
            with warnings.catch_warnings():  # vmap's slow fallback, where it has no rule
                warnings.filterwarnings("ignore", "There is a performance drop")
                problem = departure(case, transform)
        except Limit as exc:
            limits.append(f"{case.entry.id}: {exc}")
            continue
        except Excused as exc:
            excused.append(f"{case.entry.id}: {exc}")
            limits.append(excused[-1])
            if reference is not None and case.entry.id in reference.on(target.device):
                met[FIXED].append(case.entry.id)  # under autocast it kept to its control
            continue
        ran += 1
        if reference is not None and case.entry.id in reference.on(target.device):
            met[REPRODUCED if problem else FIXED].append(case.entry.id)
        elif problem:
            departures.append(f"{callables(case)[0][0]} [entry {case.entry.id}]: {problem}")
    if reference is not None and (met[REPRODUCED] or met[FIXED]):
        status = REPRODUCED if met[REPRODUCED] else FIXED
        record(PROPERTY, record_of(reference.defect, status))
        print(f"reference defect {reference.defect}: reproduced by {met[REPRODUCED]}, "
              f"fixed for {met[FIXED]}")
    if excused:  # each spared entry and its evidence, counted by every report
        record(EXCUSE_PROPERTY, {"mechanism": "transform limit", "evidence": excused})
    where = f"torch.func.{transform} over {category} on {target}, autocast dtype {dtype}"
    if departures:
        raise ConformanceFailure(f"{where}: {len(departures)} of {ran} entries depart from "
                                 "the untransformed call:\n" + "\n".join(
                                     f"  {d}" for d in departures))
    if not ran:
        raise NotApplicable(f"not applicable: torch.func.{transform} runs none of {category}'s "
                            f"{len(cases)} entries on float32 inputs without autocast either ("
                            + "; ".join(limits[:3]) + ("; ..." if len(limits) > 3 else "") + ")")


# -- functional_call -----------------------------------------------------------------


def make_module(device: str) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                                 torch.nn.Linear(16, 4), torch.nn.Softmax(-1))
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module.to(device)


def check_functional_call(target: Target, dtype: torch.dtype,
                          record: Callable[[str, Any], None] = lambda *_: None) -> None:
    """functional_call gives the module's own dtypes and values under autocast, and
    torch.func.grad through it the gradients autograd gives, in the parameters' dtype; where
    it departs the same way without autocast too (dtypes by dtypes, values by values), the
    device's transform does, not its autocast (recorded as excused)."""
    problem = _functional_call(target, dtype)
    if problem is None:
        return
    plain = _functional_call(target, None)
    if plain is not None and _call_kind(plain) == _call_kind(problem):
        said = (f"torch.func over a module on {target} departs without autocast too "
                f"({first_line(plain)})")
        record(EXCUSE_PROPERTY, {"mechanism": "transform limit", "evidence": said})
        raise NotApplicable(f"not applicable: {said}")
    raise problem


def _call_kind(failure: ConformanceFailure) -> str:
    """Whether a functional_call failure is of dtypes or of values."""
    return "dtype" if re.search(r"dtypes?(\[\d+\])?: ", first_line(failure)) else "value"


def _functional_call(target: Target, dtype: torch.dtype | None) -> ConformanceFailure | None:
    """How functional_call and torch.func.grad depart from the module and autograd under
    autocast ``dtype`` (None: without autocast), or None."""
    module = make_module(target.device)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)).to(target.device)
    params = {k: v.detach() for k, v in module.named_parameters()}
    where = (f"torch.func.functional_call of {module.__class__.__name__} on {target} "
             + (f"under autocast {dtype}" if dtype else "without autocast"))

    # a weighted sum: the plain sum of a softmax is 1 per row, its gradient zero
    weight = torch.linspace(-1.0, 1.0, 4).to(target.device)

    def loss(p):
        out = torch.func.functional_call(module, p, (x,))
        return (out.float() * weight).sum(), out

    with target.autocast(dtype) if dtype else contextlib.nullcontext():
        grads, out = torch.func.grad(loss, has_aux=True)(params)
        want = module(x)
        (want.float() * weight).sum().backward()
    tolerance = _TOLERANCE.get(dtype)  # two paths through amp-dtype ops (a lazy device fuses)
    try:
        compare(_names(out), _names(want), "bitwise", None, f"{where}: output dtypes")
        compare(out, want, "close", tolerance, f"{where}: output")
        for name, p in module.named_parameters():
            compare(grads[name].dtype, p.grad.dtype, "bitwise", None,
                    f"{where}: gradient of {name} dtype")
            compare(grads[name], p.grad, "close", tolerance, f"{where}: gradient of {name}")
    except ConformanceFailure as exc:
        return exc
    return None
