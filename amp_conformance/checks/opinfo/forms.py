"""Argument forms of an OpInfo's samples, and the fewest samples that show every one.

Autocast bugs live in argument forms: a rank, an operand that broadcasts, a 0-dim or empty
operand, a scalar where a tensor may go, a keyword given (and with which value), a layout,
an operand of another dtype than the build's. OpInfo's sample makers produce the same form
many times over (max_pool2d: 1440 samples, the product of its parameters) and put some forms
late (a grouped convolution, a reduction keyword of a loss); the first N samples miss those,
all of them cost the product.

A sample's *forms* are one per argument position — the abstract value there (a tensor's
rank with each dimension as empty, one or more, its dtype relative to the build, layout,
contiguity; an int or float as its class: -1, 0, 1, negative or more; strings, bools,
None and dtypes as themselves) — plus the set of keywords it gives and its arity. The
tier draws a *cover*: the fewest samples (greedy, the earliest on a tie: the same on every
run and xdist worker) whose forms together are every form any sample of the op shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Form = tuple[str, Any]


def _dim(size: int) -> str:
    return "0" if size == 0 else "1" if size == 1 else "n"


def abstract(value: Any, build: torch.dtype) -> Any:
    """The form of one argument value (hashable)."""
    if isinstance(value, torch.Tensor):
        dense = value.layout == torch.strided
        dtype = "build" if value.dtype == build else str(value.dtype).removeprefix("torch.")
        return ("tensor", tuple(_dim(s) for s in value.shape), dtype,
                str(value.layout).removeprefix("torch."), value.is_contiguous() if dense else None)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, int):
        return ("int", value if value in (-1, 0, 1) else "negative" if value < 0 else "more")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ("float", str(value))
        return ("float", value if value in (-1.0, 0.0, 1.0) else
                "negative" if value < 0 else "other")
    if isinstance(value, (list, tuple)):
        return tuple(abstract(v, build) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), abstract(v, build)) for k, v in value.items()))
    return type(value).__name__


def forms_of(sample: Any, build: torch.dtype) -> frozenset[Form]:
    """Every form one sample shows."""
    found: set[Form] = {("input", abstract(sample.input, build)),
                        ("arity", len(sample.args)),
                        ("keywords", tuple(sorted(sample.kwargs)))}
    found.update((f"args[{i}]", abstract(a, build)) for i, a in enumerate(sample.args))
    found.update((f"kwargs[{k}]", abstract(v, build)) for k, v in sample.kwargs.items())
    return frozenset(found)


@dataclass(frozen=True)
class Cover:
    """Which samples (their indices in the draw) show every form, and how many forms and
    samples there were."""

    indices: tuple[int, ...]
    samples: int
    forms: int
    #: forms the chosen samples show (all of them for a cover; fewer for a first-N draw)
    shown: int
    #: the samples added because the others left a keyword value's effect unseen
    #: (show_keywords): one per such value
    redrawn: tuple[int, ...] = ()


def cover(samples: Sequence[Any], build: torch.dtype) -> Cover:
    """The fewest samples showing every form (greedy set cover; ties: the earliest)."""
    each = [forms_of(s, build) for s in samples]
    every = frozenset().union(*each) if each else frozenset()
    left, chosen = set(every), []
    while left:
        best = max(range(len(each)), key=lambda i: (len(each[i] & left), -i))
        chosen.append(best)
        left -= each[best]
    return Cover(tuple(sorted(chosen)), len(samples), len(every), len(every))


def first(samples: Sequence[Any], build: torch.dtype, limit: int | None) -> Cover:
    """The first ``limit`` samples (all with None), and how many forms they show."""
    each = [forms_of(s, build) for s in samples]
    every = frozenset().union(*each) if each else frozenset()
    taken = range(len(samples) if limit is None else min(limit, len(samples)))
    shown = frozenset().union(*(each[i] for i in taken)) if taken else frozenset()
    return Cover(tuple(taken), len(samples), len(every), len(shown))


def keyword_values(each: Sequence[frozenset[Form]]) -> list[Form]:
    """Every keyword-value form the samples show, in a stable order."""
    found = {f for forms in each for f in forms if f[0].startswith("kwargs[")}
    return sorted(found, key=repr)


#: how many samples of a keyword value are tried, the chosen ones first, then the least
#: degenerate: on torch 2.13.0's op_db a value that changes a result changes it within the
#: first 8 in 909 of 911 cases, and a value that never does costs the calls of every try
TRIES = 8


def _degeneracy(forms: frozenset[Form]) -> tuple[bool, int]:
    """Samples whose tensors have empty dimensions, then those with fewer dimensions of
    more than one element, hide a keyword's effect first (a quantile over one element)."""
    dims: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, tuple) and len(value) == 5 and value[0] == "tensor":
            dims.extend(value[1])
        elif isinstance(value, tuple):
            for v in value:
                walk(v)
    for _, value in forms:
        walk(value)
    return "0" in dims, -dims.count("n")


def show_keywords(samples: Sequence[Any], build: torch.dtype, chosen: Cover,
                  changes: Callable[[int, str], bool | None]) -> Cover:
    """``chosen`` with, for each keyword value whose chosen samples all give the result the
    keyword's default gives (``changes(index, keyword)`` is False), another sample of that
    value that changes it, if one of the first :data:`TRIES` tried does: the chosen samples
    first, then the least degenerate, one per set of forms. None from ``changes`` says the
    keyword has no default (the call without it raises), which ends its values' search."""
    each = [forms_of(s, build) for s in samples]
    order = sorted(range(len(each)),
                   key=lambda i: (i not in chosen.indices, _degeneracy(each[i]), i))
    picked, required = list(chosen.indices), set()
    for value in keyword_values(each):
        key = value[0][len("kwargs["):-1]
        tried: set[frozenset[Form]] = set()
        for i in order:
            if key in required or len(tried) == TRIES:
                break
            if value not in each[i] or each[i] in tried:
                continue
            tried.add(each[i])
            effect = changes(i, key)
            if effect is None:
                required.add(key)
            elif effect:
                if i not in picked:
                    picked.append(i)
                break
    added = tuple(sorted(set(picked) - set(chosen.indices)))
    return Cover(tuple(sorted(picked)), chosen.samples, chosen.forms, chosen.shown, added)
