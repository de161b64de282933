"""Properties of ``torch.amp.custom_fwd`` / ``torch.amp.custom_bwd`` over generated inputs.

Custom autograd functions opt into autocast through these decorators, and vendors have
shipped both wrong (state lost in backward: pytorch #87979, #71124). The properties:

* **cast_inputs**: inside an enabled region, ``custom_fwd(cast_inputs=dtype)`` casts the
  floating tensors of the device (not float64) to ``dtype`` wherever they sit in nested
  lists, tuples and dicts, hands every other value (strings, bytes, numpy arrays, other
  devices' tensors, opaque objects) to ``forward`` as the very same object, and runs
  ``forward`` with autocast off. Outside an enabled region it is a no-op, and without
  ``cast_inputs`` ``forward`` runs in the caller's state, untouched.
* **backward state**: ``custom_bwd`` runs ``backward`` with the autocast state and dtype
  the forward ran with, wherever ``backward()`` is called from.

The decorators are looked up on ``torch.amp`` when a property runs, so a backend (or a
test) that replaces them is what gets checked.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import example, given
from hypothesis import settings as Settings
from hypothesis import strategies as st
from torch.utils._pytree import tree_leaves

from amp_conformance.checks import statistics, strategies
from amp_conformance.core import devices
from amp_conformance.core.casting import is_eligible
from amp_conformance.core.compare import close
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.probes import probe
from amp_conformance.core.state import grad_and_dtype_restored, unchanged_autocast_state
from amp_conformance.core.target import Target

CAST_PROPERTY = "custom_fwd(cast_inputs=...) casts exactly the eligible tensors"
FORWARD_STATE_PROPERTY = "custom_fwd runs forward with autocast off when it casts"
BACKWARD_PROPERTY = "custom_bwd runs backward with the forward's autocast state"
CAST_TARGETS = (torch.float32, torch.float16, torch.bfloat16)
#: The label of an example that hands forward a payload tensor cast_inputs must change.
CAST_PAYLOAD = "cast payload"
#: Keyword names for generated kwargs (never ``ctx`` or ``x``, forward's own parameters).
_IDENTIFIERS = st.text(alphabet="abcdyz", min_size=1, max_size=3)


@dataclass(frozen=True)
class CastExample:
    """A call of a custom_fwd-decorated forward: where, with what, cast to what."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    cast_inputs: torch.dtype | None = torch.float32
    enabled: bool = True
    via_apply: bool = True
    seed: int = 0


@st.composite
def cast_examples(draw: Callable, target: Target) -> CastExample:
    """A call that must cast: cast_inputs a dtype, in an enabled region, with payloads
    holding tensors it changes beside ones it must leave alone
    (:func:`strategies.cast_payloads`). The calls where custom_fwd must do nothing are
    derived from it (:func:`variants`)."""
    cast_to = draw(st.sampled_from(CAST_TARGETS))
    via_apply = draw(st.booleans())
    values = draw(strategies.cast_payloads(target, cast_to))
    # Function.apply takes positional arguments only; kwargs go through a direct call.
    n_kw = 0 if via_apply else draw(st.integers(0, len(values)))
    keys = draw(st.lists(_IDENTIFIERS, min_size=n_kw, max_size=n_kw, unique=True))
    positional = len(values) - n_kw
    return CastExample(
        args=tuple(values[:positional]),
        kwargs=dict(zip(keys, values[positional:], strict=True)),
        cast_inputs=cast_to,
        enabled=True,
        via_apply=via_apply,
        seed=draw(strategies.seeds()),
    )


def variants(ex: CastExample) -> list[CastExample]:
    """``ex``, and where it casts, the same payloads where custom_fwd must change nothing:
    outside an enabled region, and without cast_inputs."""
    if ex.cast_inputs is None or not ex.enabled:
        return [ex]
    return [ex, replace(ex, enabled=False), replace(ex, cast_inputs=None)]


# -- what custom_fwd must hand to forward -------------------------------------------


def received_problems(
    got: Any, sent: Any, device: str, cast_to: torch.dtype | None, values: bool, path: str
) -> list[str]:
    """Compare what forward received with what was sent; ``cast_to`` None means no cast."""
    if isinstance(sent, torch.Tensor):
        if cast_to is None or not is_eligible(sent, device) or sent.dtype == cast_to:
            if got is sent:
                return []
            what = _tensor_text(got)
            return [f"{path}: {_tensor_text(sent)} must reach forward untouched (the same "
                    f"object), got {what}"]
        if not isinstance(got, torch.Tensor):
            return [f"{path}: expected {_tensor_text(sent)} cast to {cast_to}, got "
                    f"{type(got).__name__}"]
        if (got.dtype, got.device, got.shape) != (cast_to, sent.device, sent.shape):
            return [f"{path}: {_tensor_text(sent)} should arrive cast to {cast_to}, got "
                    f"{_tensor_text(got)}"]
        if values and sent.device.type != "meta":
            said = close(got, sent.to(cast_to), rtol=0, atol=0, equal_nan=True)
            if said is not None:
                return [f"{path}: the values differ from Tensor.to({cast_to}): {said}"]
        return []
    if isinstance(sent, (list, tuple)):
        if type(got) is not type(sent) or len(got) != len(sent):
            return [f"{path}: a {type(sent).__name__} of {len(sent)} arrived as "
                    f"{type(got).__name__} {_short(got)}"]
        problems: list[str] = []
        for i, (g, s) in enumerate(zip(got, sent, strict=True)):
            problems += received_problems(g, s, device, cast_to, values, f"{path}[{i}]")
        return problems
    if isinstance(sent, dict):
        if not isinstance(got, dict) or list(got) != list(sent):
            return [f"{path}: a dict with keys {list(sent)} arrived as {_short(got)}"]
        problems = []
        for k in sent:
            problems += received_problems(got[k], sent[k], device, cast_to, values,
                                          f"{path}[{k!r}]")
        return problems
    if got is not sent:
        return [f"{path}: {type(sent).__name__} {_short(sent)} must reach forward as the same "
                f"object, got {type(got).__name__} {_short(got)}"]
    return []


def _tensor_text(t: Any) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor on {t.device.type}"
    return f"{type(t).__name__} {_short(t)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


# -- running -------------------------------------------------------------------------


@dataclass
class Seen:
    """What forward and backward observed."""

    args: Any = None
    kwargs: Any = None
    forward: tuple | None = None
    backward: tuple | None = None


def _state(device: str) -> tuple[bool, torch.dtype, torch.dtype]:
    """(enabled, dtype, what torch.mm of float32 gives); in the caller's tensor context."""
    return torch.is_autocast_enabled(device), torch.get_autocast_dtype(device), probe(device)


def make_function(device: str, cast_inputs: torch.dtype | None,
                  seen: Seen) -> type[torch.autograd.Function]:
    """A custom autograd function decorated with torch.amp's decorators as they are now."""
    custom_fwd, custom_bwd = torch.amp.custom_fwd, torch.amp.custom_bwd

    class Recorder(torch.autograd.Function):
        @staticmethod
        @custom_fwd(device_type=device, cast_inputs=cast_inputs)
        def forward(ctx: Any, x: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            seen.args, seen.kwargs = (x, *args), kwargs
            seen.forward = _state(device)
            return x * 2 if isinstance(x, torch.Tensor) and x.is_floating_point() \
                else torch.zeros(1)

        @staticmethod
        @custom_bwd(device_type=device)
        def backward(ctx: Any, grad: torch.Tensor) -> Any:
            seen.backward = _state(device)
            return grad * 2

    return Recorder


def _source_region(target: Target, dtype: torch.dtype, enabled: bool) -> str:
    if target.fake:
        return f"target.autocast({dtype}, enabled={enabled})"
    return f"torch.autocast({target.device!r}, dtype={dtype}, enabled={enabled})"


def call_args(ex: CastExample, device: str) -> tuple:
    """The positional arguments: forward's own float32 input first, then the payloads."""
    return (strategies.TensorRecipe((2,), torch.float32, device), *ex.args)


def cast_reproduction(target: Target, amp_dtype: torch.dtype, ex: CastExample) -> str:
    dev = target.device
    call = ("Fn.apply(*args)" if ex.via_apply
            else "Fn.forward(types.SimpleNamespace(), *args, **kwargs)")
    lines = [
        "import types",
        "import numpy",
        "import torch",
        "from amp_conformance.checks.strategies import Opaque",
        f"g = torch.Generator().manual_seed({ex.seed})",
        f"args = {strategies.render(call_args(ex, dev), fake=target.fake)}",
        f"kwargs = {strategies.render(ex.kwargs, fake=target.fake)}",
        "class Fn(torch.autograd.Function):",
        "    @staticmethod",
        f"    @torch.amp.custom_fwd(device_type={dev!r}, cast_inputs={ex.cast_inputs})",
        "    def forward(ctx, *args, **kwargs):",
        f"        print(args, kwargs, torch.is_autocast_enabled({dev!r}))",
        "        return torch.zeros(1)",
        f"with {_source_region(target, amp_dtype, ex.enabled)}:",
        f"    {call}",
    ]
    if target.fake:
        lines = ["from amp_conformance.core.target import Target",
                 f"target = Target({dev!r}, fake=True)",
                 "fake = target.tensors(); fake.__enter__()"] + lines
    return "\n".join("    " + line for line in lines)


def check_cast_example(target: Target, amp_dtype: torch.dtype, ex: CastExample) -> None:
    """Call a custom_fwd-decorated forward once; raise ConformanceFailure on a departure.

    Runs in the caller's tensor context (the target's FakeTensorMode when fake)."""
    dev = target.device
    seen = Seen()
    fn = make_function(dev, ex.cast_inputs, seen)
    g = torch.Generator().manual_seed(ex.seed)
    with unchanged_autocast_state(dev, "the custom_fwd property"):
        args = strategies.materialize(call_args(ex, dev), g, target.fake)
        kwargs = strategies.materialize(ex.kwargs, g, target.fake)
        with target.autocast(amp_dtype, enabled=ex.enabled):
            outer = _state(dev)
            if ex.via_apply:
                fn.apply(*args)
            else:
                fn.forward(types.SimpleNamespace(), *args, **kwargs)

    def fail(name: str, problems: list[str]) -> None:
        shown = "\n".join(f"  {p}" for p in problems[:6])
        raise ConformanceFailure(
            f"{name}: on {target}, custom_fwd(device_type={dev!r}, cast_inputs="
            f"{ex.cast_inputs}) called in autocast(dtype={amp_dtype}, enabled={ex.enabled}) "
            f"through {'Function.apply' if ex.via_apply else 'a direct call'}:\n{shown}\n"
            f"  reproduce:\n{cast_reproduction(target, amp_dtype, ex)}"
        )

    casts = ex.cast_inputs is not None and ex.enabled
    cast_to = ex.cast_inputs if casts else None
    problems = received_problems(seen.args, args, dev, cast_to, target.has_values, "args")
    problems += received_problems(seen.kwargs, kwargs, dev, cast_to, target.has_values,
                                  "kwargs")
    if problems:
        fail(CAST_PROPERTY, problems)
    expected = (False, outer[1], torch.float32) if casts else outer
    if seen.forward != expected:
        why = ("it casts its inputs, so forward runs with autocast off" if casts
               else "without casting, forward runs in the caller's autocast state")
        fail(FORWARD_STATE_PROPERTY,
             [f"forward saw (enabled, dtype, mm of float32) = {seen.forward}, expected "
              f"{expected}: {why}"])


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return 1 + max(map(_depth, value), default=0)
    return 0


def label_cast_example(target: Target, ex: CastExample) -> None:
    """Label what the example's payloads exercise, for the statistics."""
    dev = target.device
    recipes = list(strategies.recipes_in((ex.args, ex.kwargs)))
    casts = ex.cast_inputs is not None and ex.enabled
    if casts and any(r.dtype in strategies.FLOATING and r.device == dev
                     and r.dtype != ex.cast_inputs for r in recipes):
        statistics.label(CAST_PAYLOAD)
    if not casts:
        statistics.label("no-op: " + ("no cast_inputs" if ex.enabled else "disabled region"))
    if any(r.device != dev for r in recipes):
        statistics.label("other device's tensor in payload")
    if any(r.device == dev and r.dtype not in strategies.FLOATING for r in recipes):
        statistics.label("float64, integer or bool tensor in payload")
    leaves = tree_leaves((ex.args, ex.kwargs))
    if any(isinstance(leaf, strategies.numpy.ndarray) for leaf in leaves):
        statistics.label("numpy array in payload")
    if any(isinstance(leaf, strategies.Opaque) for leaf in leaves):
        statistics.label("opaque object in payload")
    if max(map(_depth, (*ex.args, *ex.kwargs.values())), default=0) >= 2:
        statistics.label("nested containers")
    if ex.kwargs:
        statistics.label("keyword arguments")


def explicit_cast_examples(target: Target) -> list[CastExample]:
    """Examples always run first: the nestings past implementations got wrong.

    A dict inside a tuple, a list inside a dict, passthrough values beside eligible and
    ineligible tensors, keyword arguments; then cast_inputs outside an enabled region
    (a no-op) and no cast_inputs at all.
    """
    dev, other = strategies.devices_for(target)
    T = strategies.TensorRecipe
    array = [strategies.numpy.arange(3, dtype="float32")]
    nested = (
        {"w": T((2,), torch.float32, dev), "n": [T((2, 2), torch.float16, dev), "s"]},
        [T((2,), torch.float64, dev), T((2,), torch.float32, other), *array, b"b",
         strategies.Opaque()],
        (T((2,), torch.int64, dev), (T((2,), torch.bfloat16, dev),)),
    )
    keywords = {"a": {"k": (T((3,), torch.float32, dev), "text")}, "b": 3}
    return [
        CastExample(args=nested, cast_inputs=torch.float16, enabled=True, via_apply=True),
        CastExample(args=nested, kwargs=keywords, cast_inputs=torch.float32, enabled=True,
                    via_apply=False),
        CastExample(args=nested, kwargs=keywords, cast_inputs=torch.bfloat16, enabled=False,
                    via_apply=False),
        CastExample(args=nested, cast_inputs=None, enabled=True, via_apply=True),
    ]


def check_cast_inputs_property(target: Target, amp_dtype: torch.dtype,
                               settings: Settings) -> statistics.Reach:
    """custom_fwd's cast_inputs over generated nested inputs; raise on the shrunk failure.

    Each example runs as cast, then (:func:`variants`) in a disabled region and without
    cast_inputs. Returns what the examples exercised (``statistics``)."""
    def cast_inputs_property(example: CastExample) -> None:
        with statistics.example():
            label_cast_example(target, example)
            if CAST_PAYLOAD in statistics.current():
                statistics.label(statistics.CORE)
            for call in variants(example):
                label_cast_example(target, call)
                check_cast_example(target, amp_dtype, call)

    name = f"custom_fwd_cast_inputs_{devices.dtype_name(amp_dtype)}"
    cast_inputs_property.__name__ = cast_inputs_property.__qualname__ = name
    test = given(example=cast_examples(target))(cast_inputs_property)
    for known in reversed(explicit_cast_examples(target)):
        test = example(example=known)(test)
    # One tensor context for the run (a FakeTensorMode is costly to make).
    with statistics.tallied(f"{name} on {target}") as reach, target.tensors():
        settings(test)()
    return reach


# -- backward ------------------------------------------------------------------------


@dataclass(frozen=True)
class BackwardExample:
    """Forward in one autocast state, backward called from another."""

    fwd_dtype: torch.dtype
    fwd_enabled: bool
    cast_inputs: torch.dtype | None
    bwd_region: str  # "none", "disabled" or "enabled"
    bwd_dtype: torch.dtype


def backward_examples(target: Target) -> st.SearchStrategy[BackwardExample]:
    dtypes = tuple(devices.supported_amp_dtypes(target.device, target.fake))
    return st.builds(
        BackwardExample,
        st.sampled_from(dtypes),
        st.booleans(),
        st.sampled_from((None,) + CAST_TARGETS),
        st.sampled_from(("none", "disabled", "enabled")),
        st.sampled_from(dtypes),
    )


def backward_reproduction(target: Target, ex: BackwardExample) -> str:
    dev = target.device
    lines = [
        "import torch",
        "from amp_conformance.core.probes import probe",
        "class Fn(torch.autograd.Function):",
        "    @staticmethod",
        f"    @torch.amp.custom_fwd(device_type={dev!r}, cast_inputs={ex.cast_inputs})",
        "    def forward(ctx, x):",
        "        return x * 2",
        "    @staticmethod",
        f"    @torch.amp.custom_bwd(device_type={dev!r})",
        "    def backward(ctx, grad):",
        f"        print(torch.is_autocast_enabled({dev!r}), torch.get_autocast_dtype({dev!r}), "
        f"probe({dev!r}))",
        "        return grad * 2",
        f"x = torch.ones(2, device={dev!r}, requires_grad=True)",
        f"with torch.autocast({dev!r}, dtype={ex.fwd_dtype}, enabled={ex.fwd_enabled}):",
        "    y = Fn.apply(x)",
    ]
    if ex.bwd_region == "none":
        lines.append("y.float().sum().backward()")
    else:
        enabled = ex.bwd_region == "enabled"
        lines += [f"with torch.autocast({dev!r}, dtype={ex.bwd_dtype}, enabled={enabled}):",
                  "    y.float().sum().backward()"]
    return "\n".join("    " + line for line in lines)


def check_backward_example(target: Target, ex: BackwardExample) -> None:
    dev = target.device
    seen = Seen()
    fn = make_function(dev, ex.cast_inputs, seen)
    with unchanged_autocast_state(dev, "the custom_bwd property"), grad_and_dtype_restored():
        torch.set_grad_enabled(True)
        x = torch.ones(2, device=dev, requires_grad=True)
        with target.autocast(ex.fwd_dtype, enabled=ex.fwd_enabled):
            y = fn.apply(x)
        if ex.bwd_region == "none":
            y.float().sum().backward()
        else:
            with target.autocast(ex.bwd_dtype, enabled=ex.bwd_region == "enabled"):
                y.float().sum().backward()
    used_autocast = ex.fwd_enabled and ex.cast_inputs is None
    expected = (used_autocast, ex.fwd_dtype, ex.fwd_dtype if used_autocast else torch.float32)
    if seen.backward != expected:
        where = ("outside any region" if ex.bwd_region == "none"
                 else f"in an {ex.bwd_region} region of {ex.bwd_dtype}")
        raise ConformanceFailure(
            f"{BACKWARD_PROPERTY}: on {target}, forward ran in autocast(dtype={ex.fwd_dtype}, "
            f"enabled={ex.fwd_enabled}) with cast_inputs={ex.cast_inputs}, so backward should "
            f"see (enabled, dtype, mm of float32) = {expected}; it saw {seen.backward} "
            f"(backward called {where})\n"
            f"  reproduce:\n{backward_reproduction(target, ex)}"
        )


def check_backward_property(target: Target, settings: Settings) -> None:
    """custom_bwd over generated forward/backward states; raise on the shrunk failure."""
    if target.fake:
        raise ValueError("custom_bwd re-enters torch.autocast on the device: it needs the device")

    def custom_bwd_state(example: BackwardExample) -> None:
        check_backward_example(target, example)

    settings(given(example=backward_examples(target))(custom_bwd_state))()
