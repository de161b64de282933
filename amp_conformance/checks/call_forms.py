"""How the policy properties call an op: argument lists as shapes, tensor lists and literals.

Plain data, apart from the Hypothesis strategies that draw the sizes
(:mod:`amp_conformance.checks.strategies`): the run's settings read it (a vendor's
forms are merged over :data:`FORMS`), and a process that runs no property, such as a
pytest-xdist controller, then never imports Hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
#: argument list as tensor shapes (a tuple of ints), lists of tensors, and literals. A
#: vendor adds forms for its own ops with the hook pytest_amp_conformance_property_forms
#: (merged over this table for the run only: ``Settings.forms``); docs/checks.md lists these ops.
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


#: Ops whose inputs must share one dtype (after the policy's casts): an ineligible dtype
#: mixed into them makes both sides raise, so their ineligible examples use one dtype.
ONE_DTYPE = frozenset({"mm", "matmul", "__matmul__", "bmm", "baddbmm", "addbmm", "addmm",
                       "linear", "conv1d", "dot"})

def tensor_count(form: tuple) -> int:
    """How many tensors a call form takes."""
    return sum(len(item.shapes) if isinstance(item, Many) else not isinstance(item, Lit)
               for item in form)
