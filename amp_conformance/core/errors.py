"""The one failure type of the suite, and how a failure or error is shown in one line."""

from __future__ import annotations

from typing import Any


class ConformanceFailure(AssertionError):
    """An autocast behaviour that departs from what is expected."""


def first_line(message: Any, limit: int | None = None) -> str:
    """The first non-empty line of a message or exception (``""`` for none), cut to ``limit``.

    Errors from torch run to many lines (C++ traces, dispatcher listings); reports, tables
    and one-line summaries show this.
    """
    text = str(message or "").strip()
    line = text.splitlines()[0] if text else ""
    if limit is not None and len(line) > limit:
        return line[: limit - 1] + "…"
    return line


def describe_error(exc: BaseException, limit: int | None = None) -> str:
    """``TypeName: first line`` of an exception, cut to ``limit``."""
    return first_line(f"{type(exc).__name__}: {first_line(exc)}", limit)
