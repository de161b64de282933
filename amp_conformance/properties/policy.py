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
table :data:`FORMS` below only says how to call an op with tensors of generated sizes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import event, given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast, is_eligible, tensors_in, widest_eligible
from amp_conformance.core.compare import tolerance_kwargs
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.properties import strategies
from amp_conformance.schema.oplist import Entry, variants

#: The policies these properties cover, and the name a failure reports.
POLICIES = {
    "lower": "lower-precision policy casts only eligible inputs",
    "fp32": "fp32 policy casts eligible inputs to float32",
    "promote": "promote policy casts eligible inputs to the widest eligible type",
}


@dataclass(frozen=True)
class Sizes:
    """Generated sizes the call forms draw their shapes from (small: the rule, not the kernel)."""

    b: int
    m: int
    k: int
    n: int
    count: int


@dataclass(frozen=True)
class Lit:
    """A literal (non-tensor) argument."""

    value: Any


@dataclass(frozen=True)
class Many:
    """A list of tensors of these shapes (cat, stack)."""

    shapes: tuple[tuple[int, ...], ...]


def _unary(s: Sizes) -> tuple:
    return ((s.m, s.n),)


def _pair(s: Sizes) -> tuple:
    return ((s.m, s.n), (s.m, s.n))


def _vectors(count: int) -> Callable[[Sizes], tuple]:
    return lambda s: ((s.n,),) * count


def _with_dim(dim: int) -> Callable[[Sizes], tuple]:
    return lambda s: ((s.m, s.n), Lit(dim))


def _matmul(s: Sizes) -> tuple:
    return ((s.m, s.k), (s.k, s.n))


#: How the properties call an op (keyed by the op name of its op-list entries): the
#: argument list as tensor shapes (a tuple of ints), lists of tensors, and literals.
FORMS: dict[str, Callable[[Sizes], tuple]] = {
    # lower precision
    "mm": _matmul,
    "matmul": _matmul,
    "__matmul__": _matmul,
    "bmm": lambda s: ((s.b, s.m, s.k), (s.b, s.k, s.n)),
    "baddbmm": lambda s: ((s.b, s.m, s.n), (s.b, s.m, s.k), (s.b, s.k, s.n)),
    "addbmm": lambda s: ((s.m, s.n), (s.b, s.m, s.k), (s.b, s.k, s.n)),
    "addmm": lambda s: ((s.m, s.n), (s.m, s.k), (s.k, s.n)),
    "linear": lambda s: ((s.m, s.k), (s.n, s.k), (s.n,)),
    "conv1d": lambda s: ((s.b, s.k, s.m + 2), (s.n, s.k, 3)),
    # fp32
    "mse_loss": _pair,
    "l1_loss": _pair,
    "smooth_l1_loss": _pair,
    "huber_loss": _pair,
    "soft_margin_loss": _pair,
    "binary_cross_entropy_with_logits": _pair,
    "exp": _unary,
    "expm1": _unary,
    "sinh": _unary,
    "cosh": _unary,
    "sum": _unary,
    "softmax": _with_dim(0),
    "log_softmax": _with_dim(0),
    "cumsum": _with_dim(0),
    "logsumexp": _with_dim(1),
    # promote
    "cat": lambda s: (Many(((s.m, s.n),) * s.count),),
    "stack": lambda s: (Many(((s.m, s.n),) * s.count),),
    "addcmul": _vectors(3),
    "addcdiv": _vectors(3),
    "atan2": _vectors(2),
    "dot": _vectors(2),
}


@dataclass(frozen=True)
class Candidate:
    """An op of the device's op lists with the policy under test that FORMS can call."""

    entry: Entry
    name: str
    fn: Callable[..., Any]

    @property
    def op(self) -> str:
        return self.entry.op


def candidates(
    target: Target,
    amp_dtype: torch.dtype,
    policy: str,
    oplists: tuple[str, ...] = (),
    numerics: str = "bitwise",
    ops: Sequence[str] | None = None,
) -> list[Candidate]:
    """The ops to try: the device's entries of ``policy`` that apply here and FORMS knows."""
    found: dict[str, Candidate] = {}
    for entry in load_oplist(target.device, oplists).entries:
        if entry.policy != policy or entry.op not in FORMS or entry.op in found:
            continue
        if ops is not None and entry.op not in ops:
            continue
        if Case(target, amp_dtype, entry, numerics).skip_reason():
            continue
        callables = variants(entry)
        if callables:
            found[entry.op] = Candidate(entry, *callables[0])
    return list(found.values())


# -- generated examples --------------------------------------------------------------


@dataclass(frozen=True)
class Example:
    """One generated call: the op, its arguments as recipes, and the value seed."""

    op: str
    args: tuple
    seed: int


@st.composite
def examples(draw: Callable, target: Target, ops: Sequence[str]) -> Example:
    """An op and arguments for it: sizes, then per-tensor dtype, device and fill."""
    op = draw(st.sampled_from(tuple(ops)))
    sizes = draw(st.builds(Sizes, *(st.integers(1, 4) for _ in range(4)), st.integers(1, 3)))
    form = FORMS[op](sizes)
    shapes = [s for item in form for s in (item.shapes if isinstance(item, Many) else [item])
              if not isinstance(s, Lit)]
    dtypes = draw(strategies.input_dtypes(len(shapes)))
    where = draw(strategies.input_device_lists(target, len(shapes)))
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
        return Outcome(value=fn(*args))
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
    try:
        torch.testing.assert_close(out, control, equal_nan=True, **tolerance_kwargs(numerics, tolerance))
    except AssertionError as exc:
        return f"values differ from the hand-cast control ({numerics}): {exc}"
    return None


def reproduction(target: Target, amp_dtype: torch.dtype, cand: Candidate, example: Example,
                 cast_to: torch.dtype | None) -> str:
    dev, fake = target.device, target.fake
    if cand.name.startswith("Tensor."):
        fn = f"fn = lambda first, *rest: first.{cand.op}(*rest)"
    else:
        fn = f"fn = {cand.name}"
    body = [
        f"g = torch.Generator().manual_seed({example.seed})",
        f"args = {strategies.render(example.args, fake=fake)}",
        fn,
    ]
    if fake:
        body += [f"with target.autocast({amp_dtype}):", "    out = fn(*args)"]
    else:
        body += [f"with torch.autocast({dev!r}, dtype={amp_dtype}):", "    out = fn(*args)"]
    control = (f"fn(*hand_cast(args, {cast_to}, {dev!r}))" if cast_to is not None
               else "fn(*args)")
    body += [f"control = {control}  # autocast off, eligible inputs cast by hand",
             "print(out, control)"]
    head = ["import torch", "from amp_conformance.core.casting import hand_cast"]
    if fake:
        head += ["from amp_conformance.core.target import Target",
                 f"target = Target({dev!r}, fake=True)", "with target.tensors():"]
        body = ["    " + line for line in body]
    return "\n".join("    " + line for line in head + body)


def check_example(
    target: Target,
    amp_dtype: torch.dtype,
    policy: str,
    cand: Candidate,
    example: Example,
    *,
    values: bool,
    numerics: str = "bitwise",
) -> None:
    """Run one example under autocast and as the hand-cast control; raise on a departure."""
    dev = target.device
    g = torch.Generator().manual_seed(example.seed)
    with unchanged_autocast_state(dev, f"the {policy} property on {cand.name}"):
        args = strategies.materialize(example.args, g, target.fake)
        cast_to = cast_dtype(policy, amp_dtype, args, dev)
        with target.autocast(amp_dtype):
            inside = _run(cand.fn, args)
        control_args = hand_cast(args, cast_to, dev) if cast_to is not None else args
        control = _run(cand.fn, control_args)

    def fail(problem: str) -> None:
        raise ConformanceFailure(
            f"{POLICIES[policy]} [{policy}]: {cand.name} on {target}, autocast dtype "
            f"{amp_dtype}, inputs {_describe(args)}:\n  {problem}\n"
            f"  under autocast: {inside}\n  hand-cast control (inputs cast to {cast_to}): "
            f"{control}\n  reproduce:\n"
            f"{reproduction(target, amp_dtype, cand, example, cast_to)}"
        )

    undefined = policy == "promote" and not promote_defined(args, dev, amp_dtype)
    eligible_only = _all_floating_eligible(args, dev)
    # Reported by --hypothesis-show-statistics: how often examples exercise what.
    event(f"{cand.op}: " + ("both raise" if inside.error and control.error else
                            "runs" if not inside.error else "autocast raises"))
    event("every floating input eligible" if eligible_only else "some input ineligible")
    if undefined and isinstance(inside.error, RuntimeError):
        return  # at::autocast::prioritize refuses this mix; see promote_defined
    if inside.error is not None or control.error is not None:
        if inside.error is None:
            fail("autocast ran a call that fails on hand-cast inputs: it cast an input the "
                 "policy leaves alone, or left one it casts")
        if control.error is None:
            fail("autocast raised where the op runs on hand-cast inputs")
        if type(inside.error) is not type(control.error):
            fail("autocast and the control fail differently")
        return
    got = [(t.dtype, tuple(t.shape), t.device.type) for t in tensors_in(inside.value)]
    want = [(t.dtype, tuple(t.shape), t.device.type) for t in tensors_in(control.value)]
    if got != want:
        fail(f"outputs (dtype, shape, device) {got}, the hand-cast control gives {want}")
    if cast_to is not None and eligible_only and not undefined:
        floating = [d for d, _, _ in got if d.is_floating_point]
        if any(d != cast_to for d in floating):
            fail(f"every floating input is eligible, so the output should be {cast_to}; "
                 f"got {floating}")
    if values and not _symbolic(target, args, inside.value):
        problem = _values_problem(inside.value, control.value, numerics, cand.entry.tolerance)
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
) -> None:
    """Check ``policy`` on generated examples; raise ConformanceFailure on the shrunk one.

    ``values`` adds the bitwise (or close) comparison with the control; without it only
    outcomes, dtypes, shapes and devices are compared, which fake tensors support.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; properties cover {', '.join(POLICIES)}")
    if values and not target.has_values:
        raise ValueError(f"{target} carries no values: compare dtypes only (values=False)")
    cands = {c.op: c for c in candidates(target, amp_dtype, policy, oplists, numerics, ops)}
    if not cands:
        raise ValueError(f"no op of the {policy} policy in the {target.device} op lists that "
                         "the properties can call")
    def policy_property(example: Example) -> None:
        check_example(target, amp_dtype, policy, cands[example.op], example,
                      values=values, numerics=numerics)

    # Named for the report: "Falsifying example: lower_policy_bfloat16(example=...)".
    policy_property.__name__ = policy_property.__qualname__ = (
        f"{policy}_policy_{devices.dtype_name(amp_dtype)}"
    )
    # One tensor context (FakeTensorMode when fake) for the whole run: making one costs
    # far more than an example; Hypothesis itself creates no tensors inside it.
    with _quiet_fake_tensor_log(), target.tensors():
        settings(given(example=examples(target, sorted(cands)))(policy_property))()


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
