"""The backward check: gradients through an autocast region equal those through hand casts.

Users run the forward under autocast and call ``backward()`` after the region. Autocast's
casts are differentiable ops, so every float32 input must get a float32 gradient, equal to
the one autograd computes through the same casts written by hand (the ``numerics``
control, run with autocast off). A kernel that casts with a detached copy, a backward
formula that is off, or a gradient that comes back in the cast dtype is caught here and in
no forward check.

Floating outputs are reduced to a scalar with fixed-seed random weights (not a plain sum),
so a gradient permuted between elements is caught too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import control_dtype
from amp_conformance.checks.reproduction import _call_source, describe
from amp_conformance.core.casting import hand_cast, tensors_in
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.schema import argspec
from amp_conformance.schema.oplist import Entry, variants

CHECK = "backward"
FAKE_REASON = (
    "not applicable in --fake mode: autograd on fake tensors of a device this machine lacks "
    "can abort the process (the backward kernels of the absent device run), and fake "
    "tensors carry no gradients to compare")
_MARK = 'if the op is not differentiable, mark the entry backward = "<the error>"'


# -- applicability -------------------------------------------------------------------------


def _grad_specs(specs: Any) -> bool:
    """Whether any spec (inside sequences too) builds a float32 tensor of the device."""
    for spec in specs:
        if isinstance(spec, argspec.SeqSpec) and _grad_specs(spec.items):
            return True
        if isinstance(spec, argspec.TensorSpec) and not spec.other_device and (
                spec.dtype == "float32" or spec.requires_grad):
            return True
    return False


def has_grad_inputs(entry: Entry) -> bool:
    return _grad_specs((*entry.args, *entry.kwargs.values()))


def not_applicable(case: Case) -> str | None:
    """Why the backward check does not apply to ``case``, or None."""
    entry = case.entry
    if case.target.fake:
        return FAKE_REASON
    if entry.policy == "banned":
        return "not applicable: a banned op has no output under autocast to differentiate"
    if entry.backward is not None:
        return f"not applicable: {entry.qualname} is not differentiable here: {entry.backward}"
    if not has_grad_inputs(entry):
        return ("not applicable: the entry has no float32 input of the device to require grad "
                "(its policy's inputs are all in the autocast dtype, integer or elsewhere)")
    return None


# -- one run: leaves, forward, weighted backward ----------------------------------------------


@dataclass
class Run:
    """One forward and backward: the leaves that require grad (labelled as in the call),
    their dtypes before the call, the flat outputs, and what went wrong."""

    leaves: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    dtypes: list[torch.dtype] = field(default_factory=list)
    outputs: list[torch.Tensor] = field(default_factory=list)
    error: str | None = None
    #: the control's cast of the eligible inputs (None: no cast, or the autocast run)
    cast_to: torch.dtype | None = None


def _make_leaves(value: Any, label: str, device: str, run: Run) -> Any:
    """``value`` with every float32 tensor of the device (and any that asks for grad) replaced
    by a fresh leaf that requires grad, recorded in ``run`` under its place in the call."""
    if isinstance(value, (list, tuple)):
        items = [_make_leaves(v, f"{label}[{i}]", device, run) for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {k: _make_leaves(v, f"{label}[{k!r}]", device, run) for k, v in value.items()}
    if isinstance(value, torch.Tensor) and value.device.type == device and (
            value.dtype == torch.float32 or value.requires_grad):
        leaf = value.detach().requires_grad_()
        run.leaves.append((label, leaf))
        run.dtypes.append(leaf.dtype)
        return leaf
    return value


def _forward(case: Case, fn: Callable, autocast: bool) -> tuple[Run, Any]:
    """Build fresh inputs and run the call under autocast, or as the hand-cast control."""
    run = Run()
    args, kwargs = case.build_inputs()
    dev = case.target.device
    args = _make_leaves(args, "args", dev, run)
    kwargs = _make_leaves(kwargs, "kwargs", dev, run)
    try:
        if autocast:
            with case.target.autocast(case.amp_dtype):
                out = fn(*args, **kwargs)
        else:
            cast_to = run.cast_to = control_dtype(case, args, kwargs)
            with case.target.autocast(case.amp_dtype, enabled=False):
                if cast_to is not None:
                    args, kwargs = hand_cast(args, cast_to, dev), hand_cast(kwargs, cast_to, dev)
                out = fn(*args, **kwargs)
    except Exception as exc:
        run.error = f"the forward raised {type(exc).__name__}: {first_line(exc)}"
        return run, None
    run.outputs = list(tensors_in(out))
    return run, out


def _as_real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def differentiable_outputs(outputs: list[torch.Tensor]) -> list[int]:
    """Positions of the floating or complex outputs that carry a gradient."""
    return [i for i, t in enumerate(outputs)
            if (t.is_floating_point() or t.is_complex()) and t.requires_grad]


def weights(outputs: list[torch.Tensor], positions: list[int], seed: int) -> list[torch.Tensor]:
    """Fixed-seed random float32 weights, one per differentiable output (as its real view)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(_as_real(outputs[i]).shape, generator=g).to(outputs[i].device)
            for i in positions]


def _backward(run: Run, positions: list[int], ws: list[torch.Tensor]) -> None:
    """Reduce the outputs at ``positions`` with ``ws`` and call backward, outside any region."""
    try:
        loss = sum((_as_real(run.outputs[i]).float() * w).sum() for i, w in zip(positions, ws,
                                                                                 strict=True))
        loss.backward()
    except Exception as exc:
        run.error = f"backward() raised {type(exc).__name__}: {first_line(exc)}"


# -- the check -------------------------------------------------------------------------------


def check_backward(case: Case) -> None:
    """Gradients through autocast reach every float32 input in its dtype and equal the
    hand-cast control's (bitwise, or close with --numerics close)."""
    found = variants(case.entry)
    if not found:
        raise ConformanceFailure(f"{describe(case)}: no callable found for {case.entry.qualname}")
    name, fn = found[0]
    with unchanged_autocast_state(case.target.device,
                                  f"the backward check of {case.entry.qualname}"), \
            _deterministic(case.numerics):
        auto, _ = _forward(case, fn, autocast=True)
        control, _ = _forward(case, fn, autocast=False)
        _fail_if(case, name, _forward_problems(name, auto, control))
        positions = differentiable_outputs(control.outputs)
        ws = weights(control.outputs, positions, case.seed)
        _backward(control, positions, ws)
        if control.error:
            _fail_if(case, name, [f"the hand-cast control (autocast off): {control.error}; "
                                  f"{_MARK}"])
        problems = _graph_problems(name, auto, control, positions)
        if not problems:
            _backward(auto, positions, ws)
            if auto.error:
                problems.append(f"{name} under autocast, backward outside the region: "
                                f"{auto.error}")
        _fail_if(case, name, problems + _grad_problems(case, auto, control))


@contextlib.contextmanager
def _deterministic(numerics: str) -> Iterator[None]:
    """A bitwise comparison of gradients needs both runs to take deterministic backward
    algorithms (cuDNN weight gradients, atomics); ops without one only warn. Restored after.
    Set through ``torch._C``: ``torch.use_deterministic_algorithms`` also imports and
    configures inductor (2.6 s on first use here), which this check does not run."""
    if numerics != "bitwise":
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch._C._set_deterministic_algorithms(before[0], warn_only=before[1])


def _labels(run: Run) -> str:
    return ", ".join(label for label, _ in run.leaves) or "none"


def _forward_problems(name: str, auto: Run, control: Run) -> list[str]:
    if control.error:
        return [f"the hand-cast control of {name} (autocast off): {control.error}"]
    if auto.error:
        return [f"{name} under autocast: {auto.error}"]
    if not differentiable_outputs(control.outputs):
        shown = [str(t.dtype).removeprefix("torch.") for t in control.outputs]
        return [f"no output of {name} carries a gradient from its float32 inputs "
                f"({_labels(control)}) even in the hand-cast control (outputs: {shown}); {_MARK}"]
    return []


def _graph_problems(name: str, auto: Run, control: Run, positions: list[int]) -> list[str]:
    """The autocast outputs the control differentiates must carry a gradient too."""
    problems = []
    for i in positions:
        if i >= len(auto.outputs):
            problems.append(f"{name} under autocast returned {len(auto.outputs)} tensors, the "
                            f"control {len(control.outputs)}")
            break
        got, want = auto.outputs[i], control.outputs[i]
        if not got.requires_grad:
            problems.append(f"output {i} ({got.dtype}) of {name} under autocast carries no "
                            "gradient (requires_grad=False, no grad_fn) where the control's "
                            f"does: autocast cut the graph, no gradient reaches {_labels(auto)}")
        elif got.shape != want.shape:
            problems.append(f"output {i} of {name} under autocast has shape {tuple(got.shape)}, "
                            f"the control {tuple(want.shape)}")
    return problems


def _grad_problems(case: Case, auto: Run, control: Run) -> list[str]:
    """Per input: a gradient where the control has one, in the input's dtype, equal to it."""
    problems = []
    for (label, leaf), dtype, (_, ref) in zip(auto.leaves, auto.dtypes, control.leaves,
                                              strict=True):
        got, want = leaf.grad, ref.grad
        if want is None:
            if got is not None:
                problems.append(f"{label} got a gradient under autocast; the control's output "
                                "does not depend on it")
            continue
        if got is None:
            problems.append(f"no gradient reaches {label} ({dtype}) under autocast; the "
                            f"control gives it a {want.dtype} gradient")
        elif got.dtype != dtype:
            changed = (f"; the input itself is now {leaf.dtype}: it was cast in place"
                       if leaf.dtype != dtype else "")
            problems.append(f"the gradient of {label} is {got.dtype}, expected its input's "
                            f"dtype {dtype}{changed}")
        else:
            try:
                compare(got, want, case.numerics, _tolerance(case, control.cast_to),
                        f"the gradient of {label} (autocast vs hand-cast control)")
            except ConformanceFailure as exc:
                problems.append(str(exc))
    return problems


#: torch.testing.assert_close's default (rtol, atol) of the lower-precision dtypes
_LOWER_PRECISION_TOLERANCE = {torch.float16: {"rtol": 1e-3, "atol": 1e-5},
                              torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-5}}


def _tolerance(case: Case, cast_to: torch.dtype | None) -> Any:
    """Under --numerics close, the entry's tolerance, else that of the dtype the gradient
    was computed in: a float32 gradient that went through a bfloat16 cast has bfloat16's
    precision, which float32's default tolerance would reject."""
    if case.entry.tolerance is not None:
        return case.entry.tolerance
    return _LOWER_PRECISION_TOLERANCE.get(cast_to)


def _fail_if(case: Case, variant: str, problems: list[str]) -> None:
    if problems:
        body = "\n".join(f"  {p}" for p in problems)
        raise ConformanceFailure(f"{describe(case)}, backward:\n{body}\n  reproduce:\n"
                                 f"{reproduction(case, variant)}")


def reproduction(case: Case, variant: str) -> str:
    """Copy-paste source: the same inputs, forward under autocast, backward outside, and the
    hand-cast control, printing both gradients of every float32 input."""
    e, dev = case.entry, case.target.device
    args = ", ".join(argspec.render(s, dev, case.amp_dtype) for s in e.args)
    kwargs = ", ".join(f"{k!r}: {argspec.render(s, dev, case.amp_dtype)}" for k, s in e.kwargs.items())
    cast = control_dtype(case, *case.build_inputs()) if e.cast != "none" else None
    call = _call_source(e, variant)
    return "\n".join("    " + line for line in [
        "import torch",
        "from torch.utils._pytree import tree_leaves, tree_map",
        "def inputs():",
        f"    g = torch.Generator().manual_seed({case.seed})",
        f"    args = ({args}{',' if len(e.args) == 1 else ''})",
        f"    kwargs = {{{kwargs}}}",
        "    leaves = [t.requires_grad_() for t in tree_leaves((args, kwargs)) if isinstance(t, "
        f"torch.Tensor) and t.dtype == torch.float32 and t.device.type == {dev!r}]",
        "    return args, kwargs, leaves",
        "def backward(out):  # fixed-seed random weights, backward outside any region",
        f"    w = torch.Generator().manual_seed({case.seed})",
        "    outs = [torch.view_as_real(o.resolve_conj()) if o.is_complex() else o for o in tree_leaves(out) "
        "if isinstance(o, torch.Tensor) and o.requires_grad]",
        "    sum((o.float() * torch.randn(o.shape, generator=w)).sum() for o in outs).backward()",
        "args, kwargs, leaves = inputs()",
        f"with torch.autocast({dev!r}, dtype={case.amp_dtype}):",
        f"    out = {call}",
        "backward(out)",
        "args, kwargs, control = inputs()",
        f"cast = lambda t: t.to({cast}) if isinstance(t, torch.Tensor) and t.is_floating_point() "
        f"and t.dtype != torch.float64 and t.device.type == {dev!r} else t" if cast else "",
        "args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)" if cast else "",
        f"backward({call})  # the control, autocast off",
        "print([(a.grad, c.grad) for a, c in zip(leaves, control)])",
    ] if line)
