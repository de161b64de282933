"""Hypothesis strategies for the property checks: input dtypes, devices, values, payloads.

Strategies generate *recipes* (plain data: shape, dtype, device, fill) rather than
tensors. A recipe is built into a tensor with a seeded generator and can also render
itself as Python source, so the reproduction printed with a failing example rebuilds the
very same inputs, and Hypothesis prints and shrinks readable values instead of tensors.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy  # a dependency: torch's _cast special-cases arrays, and we check it does
import torch
from hypothesis import strategies as st
from torch.utils._pytree import tree_leaves, tree_map

from amp_conformance.core import devices
from amp_conformance.core.target import Target
from amp_conformance.schema.argspec import other_device

#: Input dtypes, in the order Hypothesis shrinks towards (the eligible float32 first).
FLOATING = (torch.float32, torch.bfloat16, torch.float16)
INELIGIBLE_FLOATING = (torch.float64,)
INTEGER = (torch.int64, torch.int32, torch.uint8)
INPUT_DTYPES = FLOATING + INELIGIBLE_FLOATING + INTEGER + (torch.bool,)

#: Value fills of floating tensors: ordinary, beyond float16's range (casts overflow to
#: inf), below its smallest subnormal (casts flush to zero), and the special values.
FILLS = ("randn", "large", "tiny", "special")
_SCALE = {"large": "1e5", "tiny": "1e-30"}
SPECIAL_VALUES = (float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 65504.0, 1e-40, -3.5)

#: ``st.sampled_from``, one strategy per sequence: the generators draw from the same few
#: sequences thousands of times, and making a strategy costs more than drawing from it.
sampled = functools.cache(st.sampled_from)


def _dtype_src(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float16"


@dataclass(frozen=True)
class TensorRecipe:
    """How to build one input tensor; ``build`` and ``source`` consume the generator alike."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: str
    fill: str = "randn"

    def _symbolic(self, fake: bool) -> bool:
        # Fake and meta tensors carry no values: they are built without the generator.
        return fake or self.device == "meta"

    def build(self, g: torch.Generator, fake: bool = False) -> torch.Tensor:
        if self._symbolic(fake):
            return torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        return self._host(g).to(self.dtype).to(self.device)

    def _host(self, g: torch.Generator) -> torch.Tensor:
        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, generator=g).bool()
        if not self.dtype.is_floating_point:
            low = 0 if self.dtype == torch.uint8 else -4
            return torch.randint(low, 5, self.shape, generator=g)
        if self.fill == "special":
            numel = math.prod(self.shape)
            reps = numel // len(SPECIAL_VALUES) + 1
            return torch.tensor(SPECIAL_VALUES).repeat(reps)[:numel].reshape(self.shape)
        t = torch.randn(self.shape, generator=g)
        return t * float(_SCALE[self.fill]) if self.fill in _SCALE else t

    def source(self, g: str = "g", fake: bool = False) -> str:
        """Python source that builds this tensor (the same values, given the same ``g``)."""
        shape, dtype, dev = self.shape, _dtype_src(self.dtype), self.device
        if self._symbolic(fake):
            return f"torch.zeros({shape}, dtype={dtype}, device={dev!r})"
        if self.dtype == torch.bool:
            host, host_dtype = f"torch.randint(0, 2, {shape}, generator={g}).bool()", torch.bool
        elif not self.dtype.is_floating_point:
            low = 0 if self.dtype == torch.uint8 else -4
            host, host_dtype = f"torch.randint({low}, 5, {shape}, generator={g})", torch.int64
        elif self.fill == "special":
            numel = math.prod(shape)
            reps = numel // len(SPECIAL_VALUES) + 1
            values = ", ".join(f"float({str(v)!r})" for v in SPECIAL_VALUES)
            host = f"torch.tensor([{values}]).repeat({reps})[:{numel}].reshape({shape})"
            host_dtype = torch.float32
        elif self.fill in _SCALE:
            host = f"(torch.randn({shape}, generator={g}) * {_SCALE[self.fill]})"
            host_dtype = torch.float32
        else:
            host, host_dtype = f"torch.randn({shape}, generator={g})", torch.float32
        # The same conversions as build(), leaving out the ones that change nothing.
        if self.dtype != host_dtype:
            host += f".to({dtype})"
        if dev != "cpu":
            host += f".to({dev!r})"
        return host


class Opaque:
    """An object autocast knows nothing about: it must reach ``forward`` untouched."""

    def __repr__(self) -> str:
        return "Opaque()"


def recipes_in(value: Any) -> Iterator[TensorRecipe]:
    return (leaf for leaf in tree_leaves(value) if isinstance(leaf, TensorRecipe))


def materialize(value: Any, g: torch.Generator, fake: bool = False) -> Any:
    """Build every recipe inside any nesting of lists, tuples and dicts, in order.

    Everything else (strings, arrays, opaque objects) is passed through as the very same
    object, so a check can test it arrived untouched by identity.
    """
    return tree_map(lambda leaf: leaf.build(g, fake) if isinstance(leaf, TensorRecipe) else leaf,
                    value)


def render(value: Any, g: str = "g", fake: bool = False) -> str:
    """Python source for a (nested) value; the counterpart of :func:`materialize`."""
    if isinstance(value, TensorRecipe):
        return value.source(g, fake)
    if isinstance(value, list):
        return "[" + ", ".join(render(v, g, fake) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(render(v, g, fake) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {render(v, g, fake)}" for k, v in value.items()) + "}"
    if isinstance(value, numpy.ndarray):
        return f"numpy.array({value.tolist()!r}, dtype=numpy.{value.dtype})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def call_reproduction(fn: str, args: Any, seed: int, target: Target, amp_dtype: torch.dtype,
                      cast_to: torch.dtype | None, count_casts: bool = False) -> str:
    """Python source that rebuilds ``args`` (recipes), calls ``fn`` (source) under autocast
    and as the hand-cast control, and prints both; ``count_casts``: instead, prints the
    conversions autocast made of each ineligible input. What a failure shows to reproduce."""
    dev, fake = target.device, target.fake
    region = (f"target.autocast({amp_dtype})" if fake
              else f"torch.autocast({dev!r}, dtype={amp_dtype})")
    control = f"fn(*hand_cast(args, {cast_to}, {dev!r}))" if cast_to is not None else "fn(*args)"
    head = ["import torch", "from amp_conformance.core.casting import hand_cast"]
    body = [f"g = torch.Generator().manual_seed({seed})", f"args = {render(args, fake=fake)}",
            f"fn = {fn}"]
    if count_casts:
        head += ["import contextlib", "from amp_conformance.core.casting import is_eligible, "
                 "tensors_in", "from amp_conformance.core.probes import CastCounter"]
        body += [f"counters = [CastCounter(t) for t in tensors_in(args) "
                 f"if not is_eligible(t, {dev!r})]",
                 f"with {region}, contextlib.ExitStack() as stack:",
                 "    for c in counters:", "        stack.enter_context(c)",
                 "    with contextlib.suppress(Exception):  # it may then refuse the inputs",
                 "        fn(*args)",
                 "print('casts of the ineligible inputs:', [c.casts for c in counters])"]
    else:
        body += [f"with {region}:", "    out = fn(*args)",
                 f"control = {control}  # autocast off, eligible inputs cast by hand",
                 "print(out, control)"]
    if fake:
        head += ["from amp_conformance.core.target import Target",
                 f"target = Target({dev!r}, fake=True)", "with target.tensors():"]
        body = ["    " + line for line in body]
    return "\n".join("    " + line for line in head + body)


# -- strategies ----------------------------------------------------------------------


def devices_for(target: Target) -> tuple[str, str]:
    """The device under test and a device autocast must leave alone (meta beside cpu)."""
    return target.device, other_device(target.device)


def input_devices(target: Target) -> st.SearchStrategy[str]:
    """Mostly the device under test; sometimes another device, whose tensors are ineligible."""
    dev, other = devices_for(target)
    return st.sampled_from((dev, dev, dev, other))


@st.composite
def _mixed_devices(draw: Any, dev: str, other: str, n: int) -> tuple[str, ...]:
    rest = [draw(sampled((other, dev))) for _ in range(n - 1)]
    rest[draw(sampled(tuple(range(n - 1))))] = other
    return (dev, *rest)


@functools.cache
def mixed_device_lists(target: Target, n: int) -> st.SearchStrategy[tuple[str, ...]]:
    """Devices of ``n >= 2`` inputs that mix devices: the first (the tensor the call
    dispatches on) on the device under test, so its Autocast kernel is entered, and at
    least one of the others on the other device, an ineligible tensor inside that kernel."""
    if n < 2:
        raise ValueError("a call of one tensor cannot mix devices")
    return _mixed_devices(*devices_for(target), n)


#: Dtypes that make a tensor of the device ineligible, float64 (which every op takes)
#: weighted above the integers and bool (which many floating ops refuse).
INELIGIBLE_DTYPES = (torch.float64,) * 3 + (torch.int64, torch.int32, torch.uint8, torch.bool)


@st.composite
def _with_ineligible(draw: Any, n: int, eligible: tuple[torch.dtype, ...],
                     ineligible: tuple[torch.dtype, ...]) -> tuple:
    bad = draw(sampled(ineligible))
    if n == 1:
        return (bad,)
    rest = [draw(sampled((*eligible, bad))) for _ in range(n - 1)]
    rest[draw(sampled(tuple(range(n - 1))))] = bad
    return (draw(sampled(eligible)), *rest)


@functools.cache  # built once per arguments: a strategy is costly to make
def ineligible_dtype_lists(
    n: int, eligible: tuple[torch.dtype, ...] = FLOATING, uniform: bool = False,
    lacks: frozenset[torch.dtype] = frozenset(),
) -> st.SearchStrategy[tuple[torch.dtype, ...]]:
    """Dtypes of ``n`` inputs with an ineligible one (float64, an integer, bool): the
    first eligible (many ops refuse an integer first input but promote a later one), at
    least one of the others ineligible. ``uniform``: all of one ineligible dtype (bool
    left out), for ops whose inputs must share a dtype, where any mix raises. ``lacks``:
    dtypes the device has no tensors of (MPS: float64), never drawn."""
    ineligible = tuple(d for d in INELIGIBLE_DTYPES if d not in lacks)
    if uniform:
        return st.sampled_from(ineligible[:-1]).map(lambda d: (d,) * n)
    return _with_ineligible(n, tuple(eligible), ineligible)


def _lacks(device: str) -> frozenset[torch.dtype]:
    """The dtypes the device has no tensors of (``DeviceProfile.refuses``, with what the
    run declares)."""
    return frozenset(devices.profile(device).refuses)


#: What a call puts beside eligible tensors of the device under test: nothing, an
#: ineligible dtype (float64, an integer, bool), or tensors of another device.
MIXES = ("all eligible", "ineligible dtype", "device mix")


def draw_inputs(draw: Any, target: Target, n: int, mix: str, eligible: Sequence[torch.dtype],
                foreign: Sequence[torch.dtype], first: torch.dtype | None = None,
                uniform: bool = False) -> tuple[tuple, tuple]:
    """(dtypes, devices) of a call's ``n`` tensors for one of :data:`MIXES`: ``eligible``
    dtypes for tensors of the device, ``foreign`` ones for the other device's (in a device
    mix the first tensor is the device's, of dtype ``first`` if given); ``uniform``, see
    :func:`ineligible_dtype_lists`."""
    dev, eligible, foreign = target.device, tuple(eligible), tuple(foreign)
    if mix == "all eligible":
        return tuple(draw(sampled(eligible)) for _ in range(n)), (dev,) * n
    if mix == "ineligible dtype":
        return draw(ineligible_dtype_lists(n, eligible, uniform, _lacks(dev))), (dev,) * n
    where = draw(mixed_device_lists(target, n))
    head = first if first is not None else draw(sampled(eligible))
    rest = [draw(sampled(foreign if d != dev else eligible)) for d in where[1:]]
    return (head, *rest), where


_FILLS = st.sampled_from(FILLS)
_SEEDS = st.integers(0, 2**16)


def fills() -> st.SearchStrategy[str]:
    return _FILLS


def seeds() -> st.SearchStrategy[int]:
    return _SEEDS


def tensor_recipes(
    target: Target,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
    dtypes: Sequence[torch.dtype] = INPUT_DTYPES,
) -> st.SearchStrategy[TensorRecipe]:
    shapes = shape if shape is not None else st.sampled_from(((2,), (2, 2), (3,), ()))
    return st.builds(
        TensorRecipe, shapes, st.sampled_from(tuple(dtypes)), input_devices(target), fills()
    )


def _arrays() -> st.SearchStrategy:
    kinds = ("float32", "float64", "float16", "int64")
    return st.builds(
        lambda n, kind: numpy.arange(n, dtype=kind), st.integers(0, 3), st.sampled_from(kinds)
    )


def passthrough_leaves() -> st.SearchStrategy:
    """Values autocast's input casting must hand over untouched, as the same object."""
    return st.one_of(
        st.text(max_size=4),
        st.binary(max_size=3),
        _arrays(),
        st.integers(-3, 3),
        st.floats(allow_nan=False, width=32),
        st.none(),
        st.booleans(),
        st.sampled_from((torch.float16, torch.float32)),
        st.builds(Opaque),
    )


# -- payloads that must be cast ------------------------------------------------------

SHAPES = ((2,), (2, 2), (3,), ())
_KEYS = st.text(alphabet="abcxyz", min_size=1, max_size=3)


def castable_recipes(target: Target, cast_to: torch.dtype) -> st.SearchStrategy[TensorRecipe]:
    """Eligible tensors (floating, not float64, of the device) whose dtype ``cast_to`` changes."""
    dtypes = tuple(d for d in FLOATING if d != cast_to)
    return st.builds(TensorRecipe, st.sampled_from(SHAPES), st.sampled_from(dtypes),
                     st.just(target.device), fills())


def ineligible_recipes(target: Target, cast_to: torch.dtype,
                       foreign: bool) -> st.SearchStrategy[TensorRecipe]:
    """Tensors a cast must leave alone: ``foreign``, a floating tensor of the other device
    that ``cast_to`` would change were it eligible; else float64, an integer or bool of
    the device."""
    dev, other = devices_for(target)
    if foreign:
        dtypes = tuple(d for d in FLOATING if d != cast_to)
        return st.builds(TensorRecipe, st.sampled_from(SHAPES), st.sampled_from(dtypes),
                         st.just(other), fills())
    return st.builds(TensorRecipe, st.sampled_from(SHAPES),
                     st.sampled_from(INELIGIBLE_FLOATING + INTEGER + (torch.bool,)),
                     st.just(dev), fills())


def _split(draw: Any, items: list, most: int) -> list[list]:
    """``items`` cut into 1 to ``most`` consecutive non-empty groups."""
    k = draw(st.integers(1, min(most, len(items))))
    cuts = sorted(draw(st.lists(st.integers(1, len(items) - 1), min_size=k - 1,
                                max_size=k - 1, unique=True))) if k > 1 else []
    bounds = [0, *cuts, len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@st.composite
def nested(draw: Any, leaves: list, depth: int = 0) -> Any:
    """Every one of ``leaves``, in order, spread over nested lists, tuples and dicts (at
    most three deep)."""
    if len(leaves) == 1 and (depth >= 3 or draw(st.booleans())):
        return leaves[0]
    groups = [[leaf] for leaf in leaves] if depth >= 3 else _split(draw, leaves, 3)
    children = [draw(nested(group, depth + 1)) for group in groups]
    kind = draw(st.sampled_from(("list", "tuple", "dict")))
    if kind == "dict":
        keys = draw(st.lists(_KEYS, min_size=len(children), max_size=len(children), unique=True))
        return dict(zip(keys, children, strict=True))
    return children if kind == "list" else tuple(children)


@functools.cache  # built once per arguments: a strategy is costly to make
def _payload_leaves(target: Target, cast_to: torch.dtype) -> tuple[st.SearchStrategy, ...]:
    """The leaves of :func:`cast_payloads`: castable tensors, an ineligible tensor of the
    device, one of the other device, an array, up to three more leaves of any kind."""
    return (st.lists(castable_recipes(target, cast_to), min_size=1, max_size=2),
            ineligible_recipes(target, cast_to, foreign=False),
            ineligible_recipes(target, cast_to, foreign=True),
            _arrays(),
            st.lists(st.one_of(tensor_recipes(target), passthrough_leaves()), max_size=3))


@st.composite
def cast_payloads(draw: Any, target: Target, cast_to: torch.dtype) -> list:
    """One to three values holding, nested anywhere, at least one tensor ``cast_to`` must
    change, a float64/integer/bool tensor of the device, a floating tensor of the other
    device, a numpy array, an opaque object, and up to three more leaves of any kind:
    every example tests both that the cast happens and what it must leave alone."""
    castable, own, foreign, arrays, more = _payload_leaves(target, cast_to)
    leaves = [*draw(castable), draw(own), draw(foreign), draw(arrays), Opaque(), *draw(more)]
    leaves = list(draw(st.permutations(leaves)))
    return [draw(nested(group, 1)) for group in _split(draw, leaves, 3)]
