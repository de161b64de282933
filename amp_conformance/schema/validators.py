"""Value validators of the op-list schema: each parses one TOML value or raises Invalid.

The field tables of :mod:`amp_conformance.schema.fields` name these per row; an
:class:`Invalid` carries every problem of a value with its sub-field (``[0].shape``), so
the loader can report all of them at once, each naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from amp_conformance.core import registry
from amp_conformance.schema import argspec

#: The autocast dtypes an entry or a skip may name.
AMP_DTYPES = ("float16", "bfloat16")
#: What the numerics control casts eligible inputs to: the autocast dtype, a fixed dtype
#: (for kernels that ignore the autocast dtype, e.g. cuDNN RNNs always run in float16),
#: the widest input type, or nothing.
CASTS = ("amp", "float32", "float16", "bfloat16", "widest", "none")
NUMERICS = ("bitwise", "close")
#: ``skip.check`` value that switches off every per-entry check.
ALL_CHECKS = "all"
ID = re.compile(r"^[A-Za-z0-9_.+-]+$")
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
EXPECT_WORDS = ("amp", "widest", "first", "error", "none")
OUTSIDE_WORDS = ("inputs", "amp", "none", "error")


class Invalid(ValueError):
    """What is wrong with a field's value, as (sub-field, message) pairs; the sub-field is
    relative to the field (``"[0].shape"``, ``".rtol"``, ``""`` for the field itself), so
    the loader can name ``args[0].shape`` and report every problem of a value at once."""

    def __init__(self, *problems: tuple[str, str]):
        super().__init__("; ".join(message for _, message in problems))
        self.problems = problems


def invalid(message: str, sub: str = "") -> Invalid:
    return Invalid((sub, message))


# -- value parsers -------------------------------------------------------------------


def string(value: Any) -> str:
    """A non-empty string (an op name, an error message start)."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"expected a non-empty string, got {value!r}")
    return value


def text(value: Any) -> str:
    """Any string, empty included (free text)."""
    if not isinstance(value, str):
        raise invalid(f"expected a string, got {value!r}")
    return value


def identifier(value: Any) -> str:
    """An entry id: safe inside a pytest id and a seed."""
    if not isinstance(value, str) or not ID.match(value):
        raise invalid(f"expected an id of letters, digits and _.+-, got {value!r}")
    return value


def boolean(value: Any) -> bool:
    """A TOML boolean: a string "true" or 1 is a mistake, not a truthy value."""
    if not isinstance(value, bool):
        raise invalid(f"expected true or false, got {value!r}")
    return value


def version(value: Any) -> str:
    """A torch version bound (``since``/``until``) as written: ``2.6`` or ``2.6.1``."""
    if not isinstance(value, str) or not VERSION.match(value):
        raise invalid(f"expected a torch version like '2.6', got {value!r}")
    return value


def _specs(items: Any, subs: list[tuple[str, Any]]) -> list[argspec.Spec]:
    """Every spec parsed, or an Invalid with the problem of each bad one."""
    try:
        limit = argspec.max_elements()
    except ValueError as exc:
        raise invalid(str(exc)) from None
    specs, problems = [], []
    for sub, value in subs:
        try:
            specs.append(argspec.parse(value, sub, limit))
        except argspec.SpecError as exc:
            problems.append((exc.field, str(exc)))
    if problems:
        raise Invalid(*problems)
    return specs


def args(value: Any) -> tuple[argspec.Spec, ...]:
    """Positional argument specs (``args[i]...`` names a problem)."""
    if not isinstance(value, list):
        raise invalid(f"expected an array of argument specs, got {value!r}")
    return tuple(_specs(value, [(f"[{i}]", v) for i, v in enumerate(value)]))


def kwargs(value: Any) -> dict[str, argspec.Spec]:
    """Keyword argument specs (``kwargs.<name>...`` names a problem)."""
    if not isinstance(value, dict):
        raise invalid(f"expected a table of keyword argument specs, got {value!r}")
    return dict(zip(value, _specs(value, [(f".{k}", v) for k, v in value.items()]), strict=True))


def _dtype_or(value: Any, words: tuple[str, ...], sub: str = "") -> str:
    allowed = [*words, *sorted(argspec.DTYPES)]
    if not isinstance(value, str) or value not in allowed:
        raise invalid(f"unknown dtype {value!r}; allowed: {', '.join(allowed)}", sub)
    return value


def _dtype_list(items: list) -> tuple[str, ...]:
    """One dtype per output tensor, in order (ops returning values and indices or info);
    a last "..." leaves the remaining outputs (bookkeeping such as RNG state) unchecked."""
    if not items or items[0] == "...":
        raise invalid("give one dtype per output tensor (at least the first)")
    if "..." in items[:-1]:
        raise invalid("'...' may only stand last, for the outputs not checked")
    return tuple(
        d if d == "..." else _dtype_or(d, ("amp", "widest", "first"), f"[{i}]")
        for i, d in enumerate(items)
    )


def dtypes(words: tuple[str, ...]) -> Callable[[Any], str | tuple[str, ...]]:
    """A parser of an expected dtype: a name, one of ``words``, or a per-output array."""
    def parse(value: Any) -> str | tuple[str, ...]:
        return _dtype_list(value) if isinstance(value, list) else _dtype_or(value, words)

    return parse


def amp_dtypes(value: Any) -> tuple[str, ...]:
    """The autocast dtypes an entry applies to; empty would silently skip the entry."""
    if not isinstance(value, list) or not value:
        raise invalid(f"expected a non-empty array of {' / '.join(map(repr, AMP_DTYPES))} "
                      f"(an empty one would skip every check of the entry), got {value!r}")
    for i, name in enumerate(value):
        if name not in AMP_DTYPES:
            raise invalid(f"unknown autocast dtype {name!r}; allowed: {', '.join(AMP_DTYPES)}",
                          f"[{i}]")
    if len(set(value)) != len(value):
        raise invalid(f"a dtype is listed twice: {value!r}")
    return tuple(value)


def tolerance(value: Any) -> dict[str, float]:
    """``{rtol, atol}``: inf, NaN or negative would make a comparison pass or never pass."""
    if not isinstance(value, dict) or set(value) != {"rtol", "atol"}:
        raise invalid(f"expected {{rtol = <number>, atol = <number>}}, got {value!r}")
    problems = [
        (f".{k}", f"expected a finite number >= 0, got {v!r}")
        for k, v in value.items()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
    ]
    if problems:
        raise Invalid(*problems)
    return dict(value)


def checks(value: Any) -> tuple[str, ...] | None:
    """The checks a skip concerns (None: ``"all"``), so none is skipped by accident."""
    known = registry.skippable()
    allowed = (f'allowed: "{ALL_CHECKS}", or one or an array of the checks that call each '
               f'entry {", ".join(known)}')
    if value == ALL_CHECKS:
        return None
    names = value if isinstance(value, list) else [value]
    if not names:
        raise invalid(f"an empty array names no check; {allowed}")
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise invalid(f"unknown check {name!r}; {allowed}")
    if len(set(names)) != len(names):
        raise invalid(f"a check is named twice: {value!r}")
    return tuple(names)


def reason(value: Any) -> str:
    """A skip's reason: shown in every skipped item, so it must say something."""
    if not isinstance(value, str) or not value.strip():
        raise invalid("every skip needs a written reason")
    return value
