"""Hypothesis strategies for the property checks: input dtypes, devices, values, payloads.

Strategies generate *recipes* (plain data: shape, dtype, device, fill) rather than
tensors. A recipe is built into a tensor with a seeded generator and can also render
itself as Python source, so the reproduction printed with a failing example rebuilds the
very same inputs, and Hypothesis prints and shrinks readable values instead of tensors.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy  # a dependency: torch's _cast special-cases arrays, and we check it does
import torch
from hypothesis import strategies as st
from torch.utils._pytree import tree_leaves, tree_map

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


# -- strategies ----------------------------------------------------------------------


def devices_for(target: Target) -> tuple[str, str]:
    """The device under test and a device autocast must leave alone (meta beside cpu)."""
    return target.device, other_device(target.device)


def input_devices(target: Target) -> st.SearchStrategy[str]:
    """Mostly the device under test; sometimes another device, whose tensors are ineligible."""
    dev, other = devices_for(target)
    return st.sampled_from((dev, dev, dev, other))


def input_device_lists(target: Target, n: int) -> st.SearchStrategy[tuple[str, ...]]:
    """Devices of ``n`` inputs: all on the device under test (most often), all on the
    other device (autocast must cast none of them), or mixed input by input."""
    dev, other = devices_for(target)
    return st.one_of(
        st.just((dev,) * n),
        st.just((other,) * n),
        st.lists(input_devices(target), min_size=n, max_size=n).map(tuple),
    )


def fills() -> st.SearchStrategy[str]:
    return st.sampled_from(FILLS)


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**16)


def input_dtypes(n: int, pool: Sequence[torch.dtype] = INPUT_DTYPES) -> st.SearchStrategy:
    """Dtypes of ``n`` inputs: all the same (any of the pool), or mixed, input by input."""
    uniform = st.sampled_from(tuple(pool)).map(lambda d: (d,) * n)
    mixed = st.lists(st.sampled_from(tuple(pool)), min_size=n, max_size=n).map(tuple)
    return st.one_of(uniform, mixed)


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


def payloads(target: Target) -> st.SearchStrategy:
    """Arbitrarily nested lists, tuples and dicts of tensors and pass-through leaves."""
    leaves = st.one_of(tensor_recipes(target), passthrough_leaves())
    keys = st.text(alphabet="abcxyz", min_size=1, max_size=3)
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(keys, children, max_size=3),
        ),
        max_leaves=8,
    )
