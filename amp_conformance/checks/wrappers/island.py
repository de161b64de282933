"""The checks of a :class:`~amp_conformance.checks.wrappers.declare.Float32Island`.

An island is called inside a region of the device's autocast (each amp dtype of the run),
its floating inputs sent as the region's activations arrive (in the amp dtype) and in
float32. A dispatch mode below autocast sees the dtypes each op actually ran in: every op
but a cast must compute in float32, the output must have the declared dtype, and the
caller's whole autocast state must be back after the island (on return, and when an op
inside raises: the mode raises at the island's first computing op). Nested inside regions
of both dtypes, inside a disabled region, and (for a context manager) around a region and
around itself, each state comes back. Gradients reach the inputs and parameters in their
own dtypes and equal the float32 computation's; so do the values (an island whose core
keeps its input's dtype: the computation in that dtype outside autocast).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.declare import INPUT, REGION, float32_body
from amp_conformance.checks.wrappers.fake_device import on_device
from amp_conformance.checks.wrappers.island_inputs import (
    activations,
    as_sent,
    built,
    by_hand,
    first_floating,
    floating,
    second_backward,
    target,
    widened,
)
from amp_conformance.checks.wrappers.island_trace import Raised, Trace, run_traced
from amp_conformance.checks.wrappers.region import kept, other_dtype
from amp_conformance.core import devices
from amp_conformance.core.casting import tensors_in
from amp_conformance.core.errors import NotApplicable, describe_error
from amp_conformance.core.state import AutocastState, grad_and_dtype_restored
from amp_conformance.core.target import Target

__all__ = ["Raised", "Trace", "activations", "run_traced", "target"]
#: the tolerances of a comparison where the island declares a part in a lower precision
_AMP_TOLERANCE = {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
                  torch.float16: {"rtol": 1e-3, "atol": 2e-3}}


def _dtypes(rule: Any, xs: tuple[Any, ...], region: torch.dtype | None) -> torch.dtype:
    if rule == INPUT:
        return first_floating(xs)
    if rule == REGION:
        return region or torch.float32
    return torch.float32


def parts(case: WrapperCase, xs: tuple[Any, ...], region: torch.dtype | None
          ) -> dict[str, Any]:
    """The dtype its core computes in and those its declared parts before and after the
    core may compute in, for inputs ``xs`` in a region of dtype ``region`` (None: no
    enabled region)."""
    w = case.wrapper
    each = w.ending if isinstance(w.ending, tuple) else (w.ending,)
    return {"dtype": _dtypes(w.core, xs, region),
            "before": (_dtypes(w.before, xs, region),) if w.before else (),
            "ending": tuple({_dtypes(e, xs, region) for e in each if e is not None})}


def _crossing(case: WrapperCase, island: Any, xs: tuple[Any, ...], passes: int
              ) -> dict[str, float]:
    """The amp dtype's tolerance once per rounding a value crosses: the ops the island's
    region parts computed in a lower precision (at least one), ``passes`` times (forward,
    and backward through them)."""
    with torch.no_grad(), torch.autocast(case.device, dtype=case.amp_dtype):
        trace, _ = run_traced(island, xs)
    times = passes * max(1, trace.rounded())
    return {k: v * times for k, v in _AMP_TOLERANCE[case.amp_dtype].items()}


def _lower_precision(case: WrapperCase) -> bool:
    """Whether a part of the island may round where its reference does not: a region
    part, or an input-dtype part compared with the float32 computation."""
    w = case.wrapper
    rules = {w.before, w.core, *(w.ending if isinstance(w.ending, tuple) else (w.ending,)),
             *(w.returns if isinstance(w.returns, tuple) else (w.returns,))}
    return bool(rules & ({REGION} if w.core == INPUT else {INPUT, REGION}))


def _reference_inputs(case: WrapperCase, rules: Any, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """What the reference computation is given: an island whose core keeps its input's
    dtype promises the computation in that dtype outside autocast, so the inputs as sent;
    any other the float32 computation's."""
    return xs if case.wrapper.core == INPUT else widened(rules, xs)


def _reference(case: WrapperCase) -> str:
    return ("the same computation in its input's dtype outside autocast"
            if case.wrapper.core == INPUT else "the float32 computation")


def _activations_of(rules: Any, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inputs sent as the region's activations (or built from one), not those the
    library always makes in one dtype (``arguments``)."""
    return tuple(x for rule, x in zip(rules, xs, strict=True) if not isinstance(rule, torch.dtype))


def _returns_problem(case: WrapperCase, out: Any, xs: tuple[Any, ...],
                     region: torch.dtype | None) -> str | None:
    declared = case.wrapper.returns
    got = [t.dtype for t in tensors_in(out) if t.is_floating_point()]
    each = declared if isinstance(declared, tuple) else (declared,) * max(len(got), 1)
    want = [_dtypes(r, xs, region) for r in each]
    if got != want:
        return (f"output {', '.join(devices.dtype_name(d) for d in got) or 'not floating'}; "
                f"declared returns={declared!r}: {', '.join(devices.dtype_name(d) for d in want)}")
    return None


def _repro(case: WrapperCase, dtype: torch.dtype, extra: list[str] | None = None) -> list[str]:
    d = case.device
    return [f"island = decl.island({d!r}); x = decl.inputs({d!r})",
            f"with torch.autocast({d!r}, dtype={case.amp_dtype}):",
            f"    out = island(*[t.to({dtype}) if t.is_floating_point() else t for t in x])",
            *(extra or ["print(out.dtype)"])]


def check_float32(case: WrapperCase) -> None:
    """Inside a region, with inputs in the amp dtype and in float32, every op computes in
    float32 and the output has the declared dtype."""
    t, dev = target(case), case.device
    problems = []
    with kept(dev), on_device(t):
        island, made, rules = built(case)
        for dtype in (case.amp_dtype, torch.float32):
            xs = activations(t, rules, made, dtype)
            with t.autocast(case.amp_dtype):
                trace, out = run_traced(island, xs, sources=_activations_of(rules, xs))
            lower = trace.lower(**parts(case, xs, case.amp_dtype))
            sent = as_sent(rules, xs, dtype)
            if lower:
                problems.append(f"{sent}: {lower}")
            wrong = _returns_problem(case, out, xs, case.amp_dtype)
            if wrong:
                problems.append(f"{sent}: {wrong}")
    if problems:
        core = F.ISLAND_INPUT if case.wrapper.core == INPUT else F.ISLAND_FLOAT32
        promise = core if any("computed" in p for p in problems) else F.ISLAND_RETURNS
        F.fail(case, promise, problems, _repro(case, case.amp_dtype))


def _after(case: WrapperCase, island: Any, xs: tuple[Any, ...], raise_first: bool
           ) -> list[str]:
    """What differs in the whole autocast state after the island from before it (the
    exception the trace raised inside must reach the caller)."""
    before = AutocastState.capture(case.device)
    try:
        run_traced(island, xs, raise_first)
    except Raised:
        pass
    else:
        if raise_first:
            return ["the exception raised inside the island did not reach the caller"]
    changes = before.diff(AutocastState.capture(case.device))
    before.restore()
    return changes


def check_restored(case: WrapperCase) -> None:
    """Inside a region (its cast cache off, so an island that turns it on shows), the whole
    autocast state of every device is the same after the island as before: on return and
    when an op inside raises."""
    t, dev = target(case), case.device
    with kept(dev), on_device(t):
        island, made, rules = built(case)
        xs = activations(t, rules, made, case.amp_dtype)
        with t.autocast(case.amp_dtype, cache_enabled=False):
            returned = _after(case, island, xs, raise_first=False)
            raised = _after(case, island, xs, raise_first=True)
    problems = ([f"after it returned: {c}" for c in returned]
                + [f"after an op inside it raised: {c}" for c in raised])
    if problems:
        F.fail(case, F.ISLAND_RESTORED, problems, [
            f"island = decl.island({dev!r}); x = decl.inputs({dev!r})",
            f"with torch.autocast({dev!r}, dtype={case.amp_dtype}, cache_enabled=False):",
            "    island(*x)",
            f"    print(torch.is_autocast_enabled({dev!r}), torch.get_autocast_dtype({dev!r}), "
            "torch.is_autocast_cache_enabled())"])


@contextlib.contextmanager
def _regions(t: Target, dtypes: tuple[torch.dtype | None, ...]) -> Iterator[None]:
    """Nested regions, outermost first; None: a disabled one."""
    with contextlib.ExitStack() as stack:
        for dtype in dtypes:
            stack.enter_context(t.autocast(dtype, enabled=dtype is not None))
        yield


def check_nesting(case: WrapperCase) -> None:
    """Inside a region of the other dtype around one of this dtype, and inside a disabled
    region in an enabled one, the island computes in float32 and gives the innermost state
    back; a context-manager island also around a region (its ops in that region's dtype,
    the island's float32 back after it) and around itself."""
    t, dev, amp = target(case), case.device, case.amp_dtype
    problems: list[str] = []
    first: tuple[tuple[torch.dtype | None, ...], torch.dtype] | None = None
    with kept(dev), on_device(t):
        island, made, rules = built(case)
        for dtypes in ((other_dtype(amp), amp), (amp, None)):
            where = " > ".join("disabled" if d is None else devices.dtype_name(d) for d in dtypes)
            # what the innermost region hands on (a disabled one: float32, the caller's
            # cast), and float32 inputs
            for dtype in dict.fromkeys((dtypes[-1] or torch.float32, torch.float32)):
                xs = activations(t, rules, made, dtype)
                with _regions(t, dtypes):
                    before = AutocastState.capture(dev)
                    trace, _ = run_traced(island, xs, sources=_activations_of(rules, xs))
                    changes = before.diff(AutocastState.capture(dev))
                lower = trace.lower(**parts(case, xs, dtypes[-1]))
                inputs = f" ({as_sent(rules, xs, dtype)})"
                found = ([f"inside {where}{inputs}: {lower}"] if lower else []) + [
                    f"inside {where}{inputs}, after it: {c}" for c in changes]
                first = first or ((dtypes, dtype) if found else None)
                problems += found
        if case.wrapper.context is not None:
            problems += _context_nesting(case, t, activations(t, rules, made, amp))
    if problems:
        F.fail(case, F.ISLAND_NESTING, problems,
               _nested_repro(case, *first) if first else _repro(case, amp))


def _nested_repro(case: WrapperCase, dtypes: tuple[torch.dtype | None, ...],
                  dtype: torch.dtype) -> list[str]:
    """The nesting the first problem names: its regions, outermost first, the inputs in
    what the innermost hands on."""
    d = case.device
    lines = [f"island = decl.island({d!r}); x = decl.inputs({d!r})"]
    for depth, region in enumerate(dtypes):
        lines.append("    " * depth + (f"with torch.autocast({d!r}, enabled=False):"
                                       if region is None else
                                       f"with torch.autocast({d!r}, dtype={region}):"))
    inner = "    " * len(dtypes)
    return [*lines,
            f"{inner}out = island(*[t.to({dtype}) if t.is_floating_point() else t for t in x])",
            f"{inner}print(out.dtype, torch.is_autocast_enabled({d!r}), "
            f"torch.get_autocast_dtype({d!r}))"]


def _context_nesting(case: WrapperCase, t: Target, xs: tuple[Any, ...]) -> list[str]:
    dev, amp, make = case.device, case.amp_dtype, case.wrapper.context
    problems = []
    with t.autocast(amp):
        with make(dev):
            with t.autocast(amp), Trace() as inner:
                float32_body(*xs)
            if not any(d == amp for _, dtypes in inner.ops for d in dtypes):
                problems.append(f"a {devices.dtype_name(amp)} region inside it computed "
                                "nothing in its dtype")
            with make(dev):
                pass
            with Trace() as after:
                float32_body(*xs)
            if after.lower():
                problems.append(f"after a region and the island itself nested inside it: "
                                f"{after.lower()}")
        if not torch.is_autocast_enabled(dev) or torch.get_autocast_dtype(dev) != amp:
            problems.append(f"after the nested islands: {F.state_of(dev)}; expected the "
                            f"{devices.dtype_name(amp)} region back")
    return problems


Grads = tuple[list[torch.Tensor | None], list[tuple[str, torch.Tensor | None]], Any]


def _grads(case: WrapperCase, island: Any, made: tuple[Any, ...], rules: tuple[Any, ...],
           in_region: bool) -> Grads | None:
    """The inputs' and parameters' gradients of one call (None: no output depends on
    either)."""
    leaves = [t.detach().clone().requires_grad_() if floating(t) else t for t in made]
    params = _parameters(island)
    for _, p in params:
        p.grad = None
    xs = by_hand(rules, tuple(leaves), case.amp_dtype)
    if in_region:
        with torch.autocast(case.device, dtype=case.amp_dtype):
            out = island(*xs)
    else:
        reference = case.wrapper.reference or island
        with torch.autocast(case.device, enabled=False):
            out = reference(*_reference_inputs(case, rules, xs))
    loss = [o.float().sum() for o in tensors_in(out) if o.is_floating_point() and o.requires_grad]
    if not loss:
        return None
    try:
        sum(loss).backward()
    except RuntimeError as exc:
        raise second_backward(case, exc) or exc from exc
    return ([t.grad for t in leaves if floating(t)], [(n, p.grad) for n, p in params], out)


def check_grad(case: WrapperCase) -> None:
    """Gradients reach every floating input (float32 leaves, sent in the amp dtype) and
    every parameter, each in its own dtype, equal to those of the reference computation
    (``_reference_inputs``; an input's within the amp dtype's tolerances, as it was sent
    in it; a parameter's, where the island declares a part in a lower precision, within
    them once per rounding it crosses there and back); not applicable where no output
    depends on either."""
    dev, problems = case.device, []
    with kept(dev), grad_and_dtype_restored():
        torch.set_grad_enabled(True)
        island, made, rules = built(case)
        tolerance = (_crossing(case, island, by_hand(rules, made, case.amp_dtype), 2)
                     if _lower_precision(case) else {})
        reference = _grads(case, island, made, rules, in_region=False)
        inside = _grads(case, island, made, rules, in_region=True)
    if reference is None:
        trained = [n for n, p in _parameters(island) if p.requires_grad]
        held = (f" (though {len(trained)} of its parameters require"
                f"{'s' if len(trained) == 1 else ''} grad: {', '.join(trained[:3])})"
                if trained else "")
        raise NotApplicable(f"not applicable: no output of {case.wrapper.name} depends on a "
                            f"floating input or a parameter{held}, inside a region or in "
                            f"{_reference(case)}: no gradient to check")
    if inside is None:
        F.fail(case, F.ISLAND_GRAD, [f"inside a region no output depends on a floating input "
                                     f"or a parameter; in {_reference(case)} they do"],
               _repro(case, case.amp_dtype, ["print(out.requires_grad)"]))
    (got, got_params, _), (want, want_params, _) = inside, reference
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        # an input sent in the amp dtype has its gradient summed in that dtype, where it is
        # used twice: within the amp dtype's tolerances, whatever the island
        problems += _grad_problem(f"input {i}", g, w, torch.float32,
                                  _AMP_TOLERANCE[case.amp_dtype], _reference(case))
    for (name, g), (_, w) in zip(got_params, want_params, strict=True):
        p = dict(_parameters(island))[name]
        problems += _grad_problem(f"parameter {name}", g, w, p.dtype, tolerance,
                                  _reference(case))
    if problems:
        F.fail(case, F.ISLAND_GRAD, problems, _repro(case, case.amp_dtype, [
            "out.float().sum().backward()"]))


def _parameters(island: Any) -> list[tuple[str, torch.Tensor]]:
    return list(island.named_parameters()) if isinstance(island, torch.nn.Module) else []


def _grad_problem(what: str, got: torch.Tensor | None, want: torch.Tensor | None,
                  dtype: torch.dtype, tolerance: dict[str, float], reference: str
                  ) -> list[str]:
    if got is None:
        return [] if want is None else [f"{what}: no gradient"]
    if got.dtype != dtype:
        return [f"{what}: gradient in {devices.dtype_name(got.dtype)}, expected "
                f"{devices.dtype_name(dtype)}"]
    if want is not None:
        try:
            torch.testing.assert_close(got, want, **tolerance)
        except AssertionError as exc:
            return [f"{what}: gradient differs from {reference}'s: "
                    f"{describe_error(exc)}"]
    return []


def check_numerics(case: WrapperCase) -> None:
    """The output inside a region equals the reference computation's on the same inputs
    (``_reference_inputs``; the declared reference, or the island outside any region),
    within the output dtype's tolerances (the amp dtype's where the island declares a part
    in a lower precision)."""
    dev, amp, problems = case.device, case.amp_dtype, []
    with kept(dev), torch.no_grad():
        island, made, rules = built(case)
        tolerance = (_crossing(case, island, by_hand(rules, made, amp), 1)
                     if _lower_precision(case) else {})
        for dtype in (amp, torch.float32):
            xs = activations(target(case), rules, made, dtype)
            with torch.autocast(dev, dtype=amp):
                out = island(*xs)
            with torch.autocast(dev, enabled=False):
                want = (case.wrapper.reference or island)(*_reference_inputs(case, rules, xs))
            problems += _differences(out, want, f"{as_sent(rules, xs, dtype)}: ", tolerance,
                                     _reference(case))
    if problems:
        F.fail(case, F.ISLAND_NUMERICS_INPUT if case.wrapper.core == INPUT
               else F.ISLAND_NUMERICS, problems, _repro(case, amp))


def _differences(out: Any, want: Any, where: str, tolerance: dict[str, float],
                 reference: str) -> list[str]:
    outs, wants = list(tensors_in(out)), list(tensors_in(want))
    problems = [] if len(outs) == len(wants) else [
        f"{where}{len(outs)} output tensors, {reference} gives {len(wants)}"]
    for i, (o, w) in enumerate(zip(outs, wants, strict=False)):
        try:
            torch.testing.assert_close(o, w.to(o.dtype), **tolerance)
        except AssertionError as exc:
            problems.append(f"{where}output {i}: {describe_error(exc)}")
    return problems
