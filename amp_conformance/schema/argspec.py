"""Declarative argument specs: parsed from TOML, built into tensors, rendered as Python.

A spec is a plain TOML value (a literal argument) or a table whose keys say what it is:

* ``{shape = [8, 8], dtype = "float32"}`` a tensor (``fill``, ``low``, ``high``,
  ``values``, ``requires_grad``, ``device = "other"`` refine it; ``dtype = "amp"``
  means the autocast dtype under test);
* ``{tuple = [...]}`` / ``{list = [...]}`` a sequence of specs;
* ``{torch_dtype = "float64"}`` a ``torch.dtype`` value; ``{none = true}`` ``None``.

A tensor has at most :func:`max_elements` elements (2**20 unless the environment variable
``AMP_CONFORMANCE_MAX_ELEMENTS`` says otherwise), so a typo in a shape is an error of the
list, not an out-of-memory kill of the run.

Building and rendering walk the specs in the same order with the same seeded
generator, so the reproduction printed on failure rebuilds the very same inputs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Union

import torch

DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
        "int8", "int16", "int32", "int64", "uint8", "bool",
    )
}
FILLS = ("randn", "uniform", "randint", "ones", "zeros", "arange")
AMP = "amp"
#: The most elements a tensor spec may have, unless MAX_ELEMENTS_ENV says otherwise.
MAX_ELEMENTS = 2**20
MAX_ELEMENTS_ENV = "AMP_CONFORMANCE_MAX_ELEMENTS"


def max_elements() -> int:
    """The bound on the elements of one tensor spec (raises ValueError on a bad override)."""
    raw = os.environ.get(MAX_ELEMENTS_ENV, "").strip()
    if not raw:
        return MAX_ELEMENTS
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"environment variable {MAX_ELEMENTS_ENV} must be a positive integer, "
                         f"got {raw!r}")
    return limit


class SpecError(ValueError):
    """A malformed spec; ``field`` is the dotted path of the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str = "float32"
    fill: str = "randn"
    low: float | None = None
    high: float | None = None
    values: Any = None
    requires_grad: bool = False
    other_device: bool = False


@dataclass(frozen=True)
class SeqSpec:
    kind: str  # "tuple" or "list"
    items: tuple[Spec, ...]


@dataclass(frozen=True)
class DtypeValue:
    name: str


@dataclass(frozen=True)
class NoneValue:
    pass


@dataclass(frozen=True)
class Literal:
    value: Any


Spec = Union[TensorSpec, SeqSpec, DtypeValue, NoneValue, Literal]

_TENSOR_KEYS = {"shape", "dtype", "fill", "low", "high", "values", "requires_grad", "device"}


def _dtype_name(value: Any, field: str, allow_amp: bool) -> str:
    allowed = set(DTYPES) | ({AMP} if allow_amp else set())
    if not isinstance(value, str) or value not in allowed:
        raise SpecError(field, f"unknown dtype {value!r}; allowed: {', '.join(sorted(allowed))}")
    return value


def _number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, f"expected a number, got {value!r}")
    return value


def _parse_tensor(table: dict, field: str, limit: int) -> TensorSpec:
    unknown = set(table) - _TENSOR_KEYS
    if unknown:
        raise SpecError(
            f"{field}.{sorted(unknown)[0]}",
            f"unknown tensor field; allowed: {', '.join(sorted(_TENSOR_KEYS))}",
        )
    values = table.get("values")
    shape = table.get("shape")
    if shape is None and values is None:
        raise SpecError(f"{field}.shape", "a tensor needs 'shape' or 'values'")
    if shape is not None:
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise SpecError(f"{field}.shape", f"expected a list of non-negative ints, got {shape!r}")
        if math.prod(shape) > limit:
            raise SpecError(f"{field}.shape", f"{math.prod(shape)} elements is more than the "
                            f"{limit} allowed per tensor (raise it with {MAX_ELEMENTS_ENV})")
    if values is not None and not isinstance(values, (list, int, float)):
        raise SpecError(f"{field}.values", f"expected a number or nested list, got {values!r}")
    dtype = _dtype_name(table.get("dtype", "float32"), f"{field}.dtype", allow_amp=True)
    floating = dtype == AMP or DTYPES[dtype].is_floating_point or DTYPES[dtype].is_complex
    fill = table.get("fill", "randn" if floating else "randint")
    if fill not in FILLS:
        raise SpecError(f"{field}.fill", f"unknown fill {fill!r}; allowed: {', '.join(FILLS)}")
    low = table.get("low")
    high = table.get("high")
    if low is not None:
        _number(low, f"{field}.low")
    if high is not None:
        _number(high, f"{field}.high")
    if fill == "randint" and high is None and dtype != "bool" and values is None:
        raise SpecError(f"{field}.high", "fill 'randint' needs an exclusive upper bound 'high'")
    if low is not None and high is not None and low > high:
        raise SpecError(f"{field}.low", f"low {low} is above high {high}")
    requires_grad = table.get("requires_grad", False)
    if not isinstance(requires_grad, bool):
        raise SpecError(f"{field}.requires_grad", "expected true or false")
    device = table.get("device", "same")
    if device not in ("same", "other"):
        raise SpecError(f"{field}.device", f"expected 'same' or 'other', got {device!r}")
    return TensorSpec(
        shape=tuple(shape) if shape is not None else (),
        dtype=dtype,
        fill=fill,
        low=low,
        high=high,
        values=values,
        requires_grad=requires_grad,
        other_device=device == "other",
    )


def parse(value: Any, field: str, limit: int | None = None) -> Spec:
    """Parse one TOML value into a spec; raises SpecError naming the field. ``limit`` bounds
    the elements of a tensor (default :func:`max_elements`)."""
    if limit is None:
        limit = max_elements()
    if isinstance(value, dict):
        if "shape" in value or "values" in value:
            return _parse_tensor(value, field, limit)
        keys = set(value)
        if keys in ({"tuple"}, {"list"}):
            (kind,) = keys
            items = value[kind]
            if not isinstance(items, list):
                raise SpecError(f"{field}.{kind}", "expected an array of specs")
            return SeqSpec(kind, tuple(parse(v, f"{field}.{kind}[{i}]", limit)
                                      for i, v in enumerate(items)))
        if keys == {"torch_dtype"}:
            return DtypeValue(_dtype_name(value["torch_dtype"], f"{field}.torch_dtype", True))
        if keys == {"none"} and value["none"] is True:
            return NoneValue()
        raise SpecError(
            field,
            f"unrecognised table with keys {sorted(keys)}; a tensor has 'shape' or 'values', "
            "others are {tuple=[...]}, {list=[...]}, {torch_dtype=...}, {none=true}",
        )
    if isinstance(value, list):
        if not all(isinstance(v, (int, float, bool, str)) for v in value):
            raise SpecError(field, "a literal list holds only numbers, booleans and strings")
        return Literal(list(value))
    if isinstance(value, (int, float, bool, str)):
        return Literal(value)
    raise SpecError(field, f"unsupported value {value!r}")


def resolve_dtype(name: str, amp_dtype: torch.dtype) -> torch.dtype:
    return amp_dtype if name == AMP else DTYPES[name]


def other_device(device: str) -> str:
    """A device type that is not the one under test, for ineligible inputs."""
    return "meta" if device == "cpu" else "cpu"


class Builder:
    """Builds specs into values on ``device`` with a generator seeded per case."""

    def __init__(self, device: str, amp_dtype: torch.dtype, seed: int):
        self.device = device
        self.amp_dtype = amp_dtype
        self.generator = torch.Generator().manual_seed(seed)

    def build(self, spec: Spec) -> Any:
        if isinstance(spec, TensorSpec):
            return self._tensor(spec)
        if isinstance(spec, SeqSpec):
            items = [self.build(s) for s in spec.items]
            return tuple(items) if spec.kind == "tuple" else items
        if isinstance(spec, DtypeValue):
            return resolve_dtype(spec.name, self.amp_dtype)
        if isinstance(spec, NoneValue):
            return None
        return spec.value

    def _tensor(self, spec: TensorSpec) -> torch.Tensor:
        dtype = resolve_dtype(spec.dtype, self.amp_dtype)
        device = other_device(self.device) if spec.other_device else self.device
        t = _host_tensor(spec, dtype, self.generator)
        if _is_fake(t) and t.device.type != device:
            # A fake host tensor cannot be copied to a device this torch was not built for;
            # fake tensors carry no values, so an empty one of the same shape stands in.
            t = torch.empty(t.shape, dtype=dtype, device=device)
        else:
            t = t.to(device=device, dtype=dtype)
        if spec.requires_grad:
            t.requires_grad_(True)
        return t


def _is_fake(t: torch.Tensor) -> bool:
    """Whether ``t`` was made under FakeTensorMode (the --fake target builds inputs there)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _host_tensor(spec: TensorSpec, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    shape = spec.shape
    if spec.values is not None:
        return torch.tensor(spec.values, dtype=dtype if dtype.is_complex else None)
    if spec.fill == "randn":
        t = torch.randn(shape, generator=g, dtype=torch.float32)
        if spec.low is not None or spec.high is not None:
            t = t.clamp(spec.low, spec.high)
        return t
    if spec.fill == "uniform":
        low = 0.0 if spec.low is None else spec.low
        high = 1.0 if spec.high is None else spec.high
        return torch.rand(shape, generator=g, dtype=torch.float32) * (high - low) + low
    if spec.fill == "randint":
        low = 0 if spec.low is None else int(spec.low)
        high = 2 if spec.high is None else int(spec.high)
        return torch.randint(low, high, shape, generator=g)
    if spec.fill == "arange":
        n = 1
        for d in shape:
            n *= d
        return torch.arange(n, dtype=torch.float32).reshape(shape)
    return (torch.ones if spec.fill == "ones" else torch.zeros)(shape)


def render(spec: Spec, device: str, amp_dtype: torch.dtype) -> str:
    """Python source that rebuilds ``spec`` with a generator ``g`` seeded like Builder."""
    if isinstance(spec, SeqSpec):
        inner = ", ".join(render(s, device, amp_dtype) for s in spec.items)
        return f"({inner},)" if spec.kind == "tuple" else f"[{inner}]"
    if isinstance(spec, DtypeValue):
        return str(resolve_dtype(spec.name, amp_dtype))
    if isinstance(spec, NoneValue):
        return "None"
    if isinstance(spec, Literal):
        return repr(spec.value)
    dtype = resolve_dtype(spec.dtype, amp_dtype)
    dev = other_device(device) if spec.other_device else device
    shape = ", ".join(str(d) for d in spec.shape) or ""
    if spec.values is not None:
        src = f"torch.tensor({spec.values!r})"
    elif spec.fill == "randn":
        src = f"torch.randn(({shape},), generator=g)" if shape else "torch.randn((), generator=g)"
        if spec.low is not None or spec.high is not None:
            src += f".clamp({spec.low}, {spec.high})"
    elif spec.fill == "uniform":
        low = 0.0 if spec.low is None else spec.low
        high = 1.0 if spec.high is None else spec.high
        src = f"(torch.rand(({shape},), generator=g) * {high - low} + {low})"
    elif spec.fill == "randint":
        low = 0 if spec.low is None else int(spec.low)
        high = 2 if spec.high is None else int(spec.high)
        src = f"torch.randint({low}, {high}, ({shape},), generator=g)"
    elif spec.fill == "arange":
        src = f"torch.arange(float(torch.Size(({shape},)).numel())).reshape({shape})"
    else:
        src = f"torch.{spec.fill}(({shape},))"
    src += f".to({dev!r}, {dtype})"
    if spec.requires_grad:
        src += ".requires_grad_()"
    return src
