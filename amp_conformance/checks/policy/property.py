"""Eligibility properties of the cast policies, over generated inputs.

The op-list checks run each op on one fixed set of inputs. Here Hypothesis generates the
shapes, the input dtypes (float16, bfloat16, float32, float64, integers, bool, mixed),
the devices (the one under test, or another whose tensors autocast must leave alone) and
the values (ordinary, beyond float16's range, subnormal, nan/inf), and checks the rule
every policy shares: autocast casts exactly the *eligible* inputs (floating, not float64,
on the autocast device) to the policy's dtype and nothing else, so the op under autocast
behaves exactly like the op with autocast off on inputs cast by hand:

* ``lower``: eligible inputs to the autocast dtype;
* ``fp32``: eligible inputs to float32;
* ``promote``: eligible inputs to the widest eligible type.

Which ops are tried is data: the device's op lists say which ops have which policy; the
table :data:`FORMS` (in ``strategies``) only says how to call an op with tensors of
generated sizes. A run passes its own table (``forms``: FORMS merged with the vendor's
``pytest_amp_conformance_property_forms`` hooks, ``Settings.forms``); None means FORMS.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import given, reject
from hypothesis import settings as Settings
from hypothesis import strategies as st

from amp_conformance.checks import statistics, strategies
from amp_conformance.checks.call_forms import FORMS, ONE_DTYPE, Lit, Many, Sizes, tensor_count
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.core import devices
from amp_conformance.core.casting import (
    hand_cast,
    is_eligible,
    settle,
    tensors_in,
    widest_eligible,
)
from amp_conformance.core.compare import close, tolerance_kwargs
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.probes import CastCounter
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema.oplist import Entry, variants

#: How the properties call an op: op name -> form (see ``call_forms.FORMS``).
Forms = Mapping[str, Callable[[Sizes], tuple]]

#: The policies these properties cover, and the name a failure reports.
POLICIES = {
    "lower": "lower-precision policy casts only eligible inputs",
    "fp32": "fp32 policy casts eligible inputs to float32",
    "promote": "promote policy casts eligible inputs to the widest eligible type",
}


@dataclass(frozen=True)
class Candidate:
    """An op of the device's op lists with the policy under test that the forms can call."""

    entry: Entry
    name: str
    fn: Callable[..., Any]

    @property
    def op(self) -> str:
        return self.entry.op


def candidates(target: Target, amp_dtype: torch.dtype, policy: str,
               oplists: tuple[str, ...] = (), numerics: str = "bitwise",
               ops: Sequence[str] | None = None, forms: Forms | None = None) -> list[Candidate]:
    """The ops to try: the device's entries of ``policy`` that apply here and ``forms``
    (default :data:`FORMS`) knows how to call."""
    forms = FORMS if forms is None else forms
    found: dict[str, Candidate] = {}
    for entry in load_oplist(target.device, oplists).entries:
        if entry.policy != policy or entry.op not in forms or entry.op in found:
            continue
        if ops is not None and entry.op not in ops:
            continue
        if Case(target, amp_dtype, entry, numerics).skip_reason():
            continue
        callables = variants(entry)
        if callables:
            found[entry.op] = Candidate(entry, *callables[0])
    return list(found.values())


def not_candidate(target: Target, amp_dtype: torch.dtype, policy: str, op: str,
                  oplists: tuple[str, ...] = (), numerics: str = "bitwise",
                  forms: Forms | None = None) -> str | None:
    """Why ``op`` is no candidate of ``policy`` under ``amp_dtype`` (its entries' skip
    reasons), or None when it is one."""
    if candidates(target, amp_dtype, policy, oplists, numerics, [op], forms):
        return None
    reasons = [Case(target, amp_dtype, e, numerics).skip_reason() or "no callable variant"
               for e in load_oplist(target.device, oplists).entries
               if e.policy == policy and e.op == op]
    return "; ".join(dict.fromkeys(reasons)) or f"no entry of {op} has the {policy} policy"


# -- generated examples --------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One generated call: the op, its arguments as recipes, and the value seed."""

    op: str
    args: tuple
    seed: int


def _eligible_pool(policy: str, amp_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Eligible dtypes to draw: any floating type, but for promote only float32 and the
    autocast dtype (PyTorch leaves the other lower-precision type undefined there)."""
    return (torch.float32, amp_dtype) if policy == "promote" else strategies.FLOATING


def _foreign_dtypes(policy: str, amp_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """Dtypes for another device's tensors that the policy would change were they eligible,
    so a kernel blind to the device is seen casting them."""
    if policy == "lower":
        return tuple(d for d in strategies.FLOATING if d != amp_dtype)
    return (amp_dtype,) if policy == "promote" else devices.LOWER_DTYPES


def _call(draw: Callable, target: Target, policy: str, amp_dtype: torch.dtype, op: str,
          form: tuple, mix: str) -> Example:
    """One call of ``op`` in its ``form`` with tensors of ``mix``."""
    dtypes, where = strategies.draw_inputs(
        draw, target, tensor_count(form), mix, _eligible_pool(policy, amp_dtype),
        _foreign_dtypes(policy, amp_dtype), torch.float32 if policy == "promote" else None,
        uniform=op in ONE_DTYPE)
    shapes = [s for item in form for s in (item.shapes if isinstance(item, Many) else [item])
              if not isinstance(s, Lit)]
    recipes = iter([
        strategies.TensorRecipe(shape, dtype, device, draw(strategies.fills()))
        for shape, dtype, device in zip(shapes, dtypes, where, strict=True)
    ])
    args: list[Any] = []
    for item in form:
        if isinstance(item, Lit):
            args.append(item.value)
        elif isinstance(item, Many):
            args.append([next(recipes) for _ in item.shapes])
        else:
            args.append(next(recipes))
    return Example(op, tuple(args), draw(strategies.seeds()))


#: At least two tensors in a list (cat, stack), so the list can mix devices.
_SIZES = st.builds(Sizes, *(st.integers(1, 4) for _ in range(4)), st.integers(2, 3))


def examples(target: Target, ops: Sequence[str], policy: str = "lower",
             amp_dtype: torch.dtype = torch.bfloat16,
             forms: Forms | None = None) -> st.SearchStrategy[tuple[Example, ...]]:
    """Three calls per example, one per mix of :data:`strategies.MIXES`: an op with every
    input eligible, the same op with an ineligible dtype, and a device mix (of the same op
    where it takes two tensors or more, else of another op that does). Every call has a
    tensor of the device under test first, so the device's Autocast kernel is entered.

    A call per mix, rather than a mix (or an op) drawn per example, makes the share of
    examples that reach each assertion a property of the generator, not of the run's
    luck: Hypothesis draws in clumps, and a drawn mix left some runs without any device mix.
    ``forms``: how to call each op (default :data:`FORMS`).
    """
    forms = FORMS if forms is None else forms
    mixing = tuple(op for op in ops if tensor_count(forms[op](Sizes(1, 1, 1, 1, 2))) > 1)

    @st.composite
    def calls(draw: Callable) -> tuple[Example, ...]:
        op = draw(strategies.sampled(tuple(ops)))
        sizes = draw(_SIZES)
        found = [_call(draw, target, policy, amp_dtype, op, forms[op](sizes), mix)
                 for mix in strategies.MIXES[:2]]
        if mixing:
            other = op if op in mixing else draw(strategies.sampled(mixing))
            found.append(_call(draw, target, policy, amp_dtype, other, forms[other](sizes),
                               strategies.MIXES[2]))
        return tuple(found)

    return calls()


# -- running one example -------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    value: Any = None
    error: BaseException | None = None

    def __str__(self) -> str:
        if self.error is not None:
            first = first_line(self.error)
            return f"raised {type(self.error).__name__}: {first}"
        return f"returned {_describe(self.value)}"


def _describe(value: Any) -> str:
    found = [f"{t.dtype} {tuple(t.shape)} on {t.device.type}" for t in tensors_in(value)]
    return ", ".join(found) if found else repr(value)


def _run(fn: Callable[..., Any], args: tuple) -> Outcome:
    try:
        return Outcome(value=settle(fn(*args)))
    except Exception as exc:  # the outcome to compare, not an error of the check
        return Outcome(error=exc)


def cast_dtype(policy: str, amp_dtype: torch.dtype, args: Any, device: str) -> torch.dtype | None:
    """What the policy casts eligible inputs to (None: no eligible input to promote)."""
    if policy == "lower":
        return amp_dtype
    if policy == "fp32":
        return torch.float32
    return widest_eligible(args, device)


def promote_defined(args: Any, device: str, amp_dtype: torch.dtype) -> bool:
    """Whether autocast's promote rule is defined for these inputs.

    PyTorch's at::autocast::prioritize raises ("Unexpected floating ScalarType") when
    the eligible inputs mix the other lower-precision dtype with the autocast dtype
    before any float32 is seen; the property accepts that error or the widest type.
    """
    eligible = {t.dtype for t in tensors_in(args) if is_eligible(t, device)}
    return eligible <= {torch.float32, amp_dtype}


def _all_floating_eligible(args: Any, device: str) -> bool:
    floating = [t for t in tensors_in(args) if t.is_floating_point()]
    return bool(floating) and all(is_eligible(t, device) for t in floating)


def _symbolic(target: Target, *values: Any) -> bool:
    """Whether the values cannot be compared: fake tensors, or a meta tensor involved
    (an op mixing meta and real inputs may return memory nobody wrote)."""
    return target.fake or any(t.device.type == "meta" for t in tensors_in(values))


def _values_problem(out: Any, control: Any, numerics: str, tolerance: Any) -> str | None:
    said = close(out, control, equal_nan=True, **tolerance_kwargs(numerics, tolerance))
    return None if said is None else f"values differ from the hand-cast control ({numerics}): {said}"


def reproduction(target: Target, amp_dtype: torch.dtype, cand: Candidate, example: Example,
                 cast_to: torch.dtype | None, count_casts: bool = False) -> str:
    fn = (f"lambda first, *rest: first.{cand.op}(*rest)" if cand.name.startswith("Tensor.")
          else cand.name)
    return strategies.call_reproduction(fn, example.args, example.seed, target, amp_dtype,
                                        cast_to, count_casts)


@dataclass(frozen=True)
class Run:
    """One example run: its inputs, both outcomes, and the casts each made of every
    ineligible input (``_to_copy`` calls, in input order)."""

    args: tuple
    cast_to: torch.dtype | None
    inside: Outcome
    control: Outcome
    ineligible: tuple[torch.Tensor, ...]
    inside_casts: tuple[tuple, ...]
    control_casts: tuple[tuple, ...]


def _casts_of(tensors: Sequence[torch.Tensor], fn: Callable[..., Any], args: tuple
              ) -> tuple[Outcome, tuple[tuple, ...]]:
    """``fn(*args)``'s outcome, and the dtypes each of ``tensors`` was converted to."""
    with contextlib.ExitStack() as stack:
        counters = [stack.enter_context(CastCounter(t)) for t in tensors]
        outcome = _run(fn, args)
    return outcome, tuple(tuple(c.casts) for c in counters)


def run_example(target: Target, amp_dtype: torch.dtype, policy: str, cand: Candidate,
                example: Example) -> Run:
    """Run ``example`` under autocast and as the hand-cast control (autocast off)."""
    dev = target.device
    g = torch.Generator().manual_seed(example.seed)
    with unchanged_autocast_state(dev, f"the {policy} property on {cand.name}"):
        args = strategies.materialize(example.args, g, target.fake)
        cast_to = cast_dtype(policy, amp_dtype, args, dev)
        # Every ineligible tensor once; the control is handed the very same objects.
        ineligible = tuple({id(t): t for t in tensors_in(args) if not is_eligible(t, dev)}
                           .values())
        with target.autocast(amp_dtype):
            inside, inside_casts = _casts_of(ineligible, cand.fn, args)
        control_args = hand_cast(args, cast_to, dev) if cast_to is not None else args
        # The op's own conversions count on both sides; where autocast made none (the
        # rule kept), the control need not be counted (counting costs a dispatch mode).
        counted = ineligible if any(inside_casts) else ()
        control, control_casts = _casts_of(counted, cand.fn, control_args)
        control_casts = control_casts or ((),) * len(ineligible)
    return Run(args, cast_to, inside, control, ineligible, inside_casts, control_casts)


def _kind(run: Run, device: str) -> str:
    """What the call put in the device's kernel beside eligible tensors (cf. MIXES)."""
    if any(t.device.type != device for t in tensors_in(run.args)):
        return "device mix"
    return "ineligible dtype" if run.ineligible else "all eligible"


def check_example(target: Target, amp_dtype: torch.dtype, policy: str, cand: Candidate,
                  example: Example, *, values: bool, numerics: str = "bitwise") -> bool:
    """Run one call under autocast and as the hand-cast control; raise on a departure.

    Returns whether the call reached a core assertion: the outputs were compared, or,
    where both sides raise, the call mixed devices (the casts of another device's
    tensors inside the device's kernel are what it tests). A call where both sides raise
    without that tested only the casts of its ineligible inputs, and does not count.
    """
    run = run_example(target, amp_dtype, policy, cand, example)

    def fail(problem: str, count_casts: bool = False) -> None:
        raise ConformanceFailure(
            f"{POLICIES[policy]} [{policy}]: {cand.name} on {target}, autocast dtype "
            f"{amp_dtype}, inputs {_describe(run.args)}:\n  {problem}\n"
            f"  under autocast: {run.inside}\n  hand-cast control (inputs cast to "
            f"{run.cast_to}): {run.control}\n  reproduce:\n"
            f"{reproduction(target, amp_dtype, cand, example, run.cast_to, count_casts)}"
        )

    dev = target.device
    kind = _kind(run, dev)
    statistics.label(kind)
    for t, got, want in zip(run.ineligible, run.inside_casts, run.control_casts, strict=True):
        if got != want:
            fail(f"autocast cast an ineligible input, a {t.dtype} tensor on {t.device.type}: "
                 f"converted to {list(got)} under autocast, to {list(want)} in the control; "
                 f"only floating, non-float64 tensors of {dev} are eligible", count_casts=True)
    undefined = policy == "promote" and not promote_defined(run.args, dev, amp_dtype)
    if undefined:
        statistics.label("promote undefined for this mix")
        if isinstance(run.inside.error, RuntimeError):
            return False  # at::autocast::prioritize refuses this mix; see promote_defined
    if run.inside.error is not None or run.control.error is not None:
        if run.inside.error is None:
            fail("autocast ran a call that fails on hand-cast inputs: it cast an input the "
                 "policy leaves alone, or left one it casts")
        if run.control.error is None:
            fail("autocast raised where the op runs on hand-cast inputs")
        if type(run.inside.error) is not type(run.control.error):
            fail("autocast and the control fail differently")
        statistics.label(f"{kind} call: both raised")
        if kind != "device mix":
            return False  # both raise, and no other device's tensor was in the kernel
        statistics.label("device mix call: casts of the other device's tensors counted")
        return True
    statistics.label(f"{kind} call: outputs compared")
    _compare_outputs(target, cand, run, fail, undefined=undefined, values=values,
                     numerics=numerics)
    return True


def _compare_outputs(target: Target, cand: Candidate, run: Run, fail: Callable[[str], None],
                     *, undefined: bool, values: bool, numerics: str) -> None:
    """Both sides ran: the same outputs (dtype, shape, device), the policy's dtype when
    every floating input is eligible (and the promote rule defined), and (``values``) the
    same values."""
    got = [(t.dtype, tuple(t.shape), t.device.type) for t in tensors_in(run.inside.value)]
    want = [(t.dtype, tuple(t.shape), t.device.type) for t in tensors_in(run.control.value)]
    if got != want:
        fail(f"outputs (dtype, shape, device) {got}, the hand-cast control gives {want}")
    if run.cast_to is not None and _all_floating_eligible(run.args, target.device) \
            and not undefined:
        statistics.label("output dtype asserted")
        floating = [d for d, _, _ in got if d.is_floating_point]
        if any(d != run.cast_to for d in floating):
            fail(f"every floating input is eligible, so the output should be {run.cast_to}; "
                 f"got {floating}")
    if values and not _symbolic(target, run.args, run.inside.value):
        statistics.label("values compared")
        problem = _values_problem(run.inside.value, run.control.value, numerics,
                                  cand.entry.tolerance)
        if problem:
            fail(problem)


def check_policy_property(
    target: Target,
    amp_dtype: torch.dtype,
    policy: str,
    settings: Settings,
    *,
    values: bool,
    numerics: str = "bitwise",
    oplists: tuple[str, ...] = (),
    ops: Sequence[str] | None = None,
    forms: Forms | None = None,
) -> statistics.Reach:
    """Check ``policy`` on generated examples; raise ConformanceFailure on the shrunk one.

    ``values`` adds the bitwise (or close) comparison with the control; without it only
    outcomes, dtypes, shapes and devices are compared, which fake tensors support.
    Returns what the examples exercised (:mod:`amp_conformance.checks.statistics`).
    ``forms``: how to call each op (default :data:`FORMS`; a run's is ``Settings.forms``).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; properties cover {', '.join(POLICIES)}")
    if values and not target.has_values:
        raise ValueError(f"{target} carries no values: compare dtypes only (values=False)")
    cands = {c.op: c for c in candidates(target, amp_dtype, policy, oplists, numerics, ops, forms)}
    if not cands:
        raise ValueError(f"no op of the {policy} policy in the {target.device} op lists that "
                         "the properties can call")

    def policy_property(example: tuple[Example, ...]) -> None:
        with statistics.example():
            reached = [check_example(target, amp_dtype, policy, cands[call.op], call,
                                     values=values, numerics=numerics) for call in example]
            if not any(reached):
                reject()  # every call raised on both sides: nothing but casts was tested
            statistics.label(statistics.CORE)

    # Named for the report: "Falsifying example: lower_policy_bfloat16(example=...)".
    name = f"{policy}_policy_{devices.dtype_name(amp_dtype)}"
    policy_property.__name__ = policy_property.__qualname__ = name
    generated = examples(target, sorted(cands), policy, amp_dtype, forms)
    # One tensor context (FakeTensorMode when fake) for the whole run: making one costs
    # far more than an example; Hypothesis itself creates no tensors inside it.
    with statistics.tallied(f"{name} on {target}") as reach, _quiet_fake_tensor_log(), \
            target.tensors():
        settings(given(example=generated)(policy_property))()
    return reach


@contextlib.contextmanager
def _quiet_fake_tensor_log() -> Iterator[None]:
    """FakeTensorMode logs a traceback whenever a meta kernel refuses its inputs; here
    refusals are expected outcomes, compared like any other, so the log is muted (and
    its level restored)."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
