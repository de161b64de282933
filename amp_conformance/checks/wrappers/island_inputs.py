"""How a float32 island is built and fed.

Each input is sent as its declared rule says (``Float32Island.arguments``): as a region's
activation (the output of an op of the region's lower-precision list, so its values are
the float32 input's rounded to the region's dtype; and in float32), always in one dtype, or
as the author's builder makes it. The island and its inputs are made once per check and
called many times and differentiated: a tensor with autograd history among them (a closure
over a computed tensor) is a declaration error naming the field, not the raw "backward
through the graph a second time".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.checks.wrappers.declare import DeclarationError
from amp_conformance.core import devices, rng
from amp_conformance.core.casting import tensors_in
from amp_conformance.core.target import Target

Rules = tuple[Any, ...]


#: the seed the generators hold while a declaration builds its island and inputs
BUILD_SEED = 1234


def target(case: WrapperCase) -> Target:
    return Target(case.device, case.fake)


def floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _history(value: Any) -> str | None:
    """How a tensor with autograd history is held by ``value`` (itself, a closure cell, a
    default, a partial's argument, a bound method's object or a module's attribute)."""
    if isinstance(value, torch.Tensor):
        return f"a tensor with autograd history (grad_fn={type(value.grad_fn).__name__})" \
            if value.grad_fn is not None else None
    held: list[tuple[str, Any]] = []
    if isinstance(value, functools.partial):
        held += [("an argument of the partial", v) for v in (*value.args,
                                                              *value.keywords.values())]
        value = value.func
    if isinstance(getattr(value, "__self__", None), torch.nn.Module):
        value = value.__self__
    if isinstance(value, torch.nn.Module):
        held += [(f"attribute {name!r} of {type(m).__name__}", v)
                 for m in value.modules() for name, v in (*vars(m).items(),
                                                          *m._buffers.items())]
    code = getattr(value, "__code__", None)
    for name, cell in zip(getattr(code, "co_freevars", ()), getattr(value, "__closure__", None)
                          or (), strict=False):
        try:
            held.append((f"its closure's {name!r}", cell.cell_contents))
        except ValueError:  # a cell not yet filled
            pass
    held += [("a default argument", v) for v in getattr(value, "__defaults__", None) or ()]
    for where, v in held:
        found = _history(v) if isinstance(v, torch.Tensor) else None
        if found:
            return f"{found} in {where}"
    return None


_HOW = ("the checks call the island many times and differentiate it, so a second backward "
        "through that history fails; make it under torch.no_grad(), or .detach() it")


def built(case: WrapperCase) -> tuple[Callable[..., Any], tuple[Any, ...], Rules]:
    """The island, its inputs as made and one sending rule per input; a declaration
    error where either holds autograd history or the rules do not match the inputs."""
    w, dev = case.wrapper, case.device
    with rng.seeded("cpu" if case.fake else dev, BUILD_SEED):  # a layer built at random repeats
        island, made = w.island(dev), tuple(w.inputs(dev))
    for i, x in enumerate(made):
        if isinstance(x, torch.Tensor) and x.grad_fn is not None:
            raise DeclarationError(w.name, "inputs", f"input {i} is a tensor with autograd "
                                   f"history (grad_fn={type(x.grad_fn).__name__}): {_HOW}")
    held = _history(island) if w.build is not None else None
    if held:
        raise DeclarationError(w.name, "build", f"the island holds {held}: {_HOW}")
    rules = w.arguments or (None,) * len(made)
    if len(rules) != len(made):
        raise DeclarationError(w.name, "arguments", f"{len(rules)} rules for the "
                               f"{len(made)} inputs inputs(device) gives")
    return island, made, rules


def second_backward(case: WrapperCase, exc: RuntimeError) -> DeclarationError | None:
    """The declaration error a "backward through the graph a second time" stands for."""
    if "backward through the graph a second time" not in str(exc):
        return None
    return DeclarationError(case.wrapper.name, "build", "differentiated a second time, the "
                            "island reaches a tensor with autograd history (made outside "
                            f"torch.no_grad(), held somewhere the checks cannot see): {_HOW}")


def activations(t: Target, rules: Rules, made: tuple[Any, ...], dtype: torch.dtype
                ) -> tuple[Any, ...]:
    """The inputs as a ``dtype`` region hands them on: each floating one the output of an op
    of the region's lower-precision list (a product with the identity, so its values are
    the input's rounded to ``dtype``), float32 ones as made; a fixed-dtype input in its
    dtype, a built one as its builder makes it."""
    def handed_on(x: Any) -> Any:
        if not floating(x) or dtype == torch.float32:
            return x
        if x.dim() and x.dtype == torch.float32:
            with t.autocast(dtype):
                y = x @ torch.eye(x.shape[-1], device=x.device)
            if y.dtype == dtype:  # a device whose policy runs matmul otherwise: cast by hand
                return y
        return x.to(dtype)
    return tuple(_by_rule(rule, x, dtype, handed_on) for rule, x in zip(rules, made,
                                                                         strict=True))


def by_hand(rules: Rules, made: tuple[Any, ...], dtype: torch.dtype) -> tuple[Any, ...]:
    """The inputs in ``dtype``, floating ones cast by hand (fixed-dtype and built ones by
    their rule)."""
    return tuple(_by_rule(rule, x, dtype, lambda v: v.to(dtype) if floating(v) else v)
                 for rule, x in zip(rules, made, strict=True))


def widened(rules: Rules, xs: tuple[Any, ...]) -> tuple[Any, ...]:
    """What was sent, in float32 for the float32 computation (a fixed-dtype input as it is)."""
    return tuple(x if isinstance(rule, torch.dtype) or not floating(x) else x.float()
                 for rule, x in zip(rules, xs, strict=True))


def _by_rule(rule: Any, x: Any, dtype: torch.dtype, default: Callable[[Any], Any]) -> Any:
    if rule is None:
        return default(x)
    if isinstance(rule, torch.dtype):
        return x.to(rule) if floating(x) else x
    return rule(x, dtype)


def first_floating(values: tuple[Any, ...]) -> torch.dtype:
    return next(t.dtype for t in tensors_in(values) if t.is_floating_point())


def as_sent(rules: Rules, xs: tuple[Any, ...], dtype: torch.dtype) -> str:
    """The inputs as they were sent, for a message: ``inputs in bfloat16`` where every
    floating one is, else each named (an argument declared float32 is not "in bfloat16")."""
    kinds = [x.dtype if isinstance(x, torch.Tensor) else None for x in xs]
    if all(k == dtype for k, x in zip(kinds, xs, strict=True) if floating(x)):
        return f"inputs in {devices.dtype_name(dtype)}"
    said = []
    for i, (rule, x, kind) in enumerate(zip(rules, xs, kinds, strict=True)):
        text = f"input {i} " + (devices.dtype_name(kind) if kind is not None else type(x).__name__)
        if isinstance(rule, torch.dtype):
            text += f" (declared {devices.dtype_name(rule)})"
        said.append(text)
    return ", ".join(said)

