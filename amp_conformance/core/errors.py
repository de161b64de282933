"""The one failure type of the suite, and how a failure or error is shown in one line."""

from __future__ import annotations

import re
from typing import Any


class ConformanceFailure(AssertionError):
    """An autocast behaviour that departs from what is expected."""


class NotApplicable(Exception):
    """A check that does not apply here (this machine, this torch, this device); the suite
    reports it skipped with the message as its reason, never passed."""


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


def headline(message: str | None) -> str:
    """The line that says what went wrong: the first, and the next where the first only
    introduces it ("torch.mm [entry mm, ...] on cpu, autocast dtype torch.bfloat16:")."""
    text = re.sub(r"^(?:\w+\.)+(\w+: )", r"\1", (message or "").strip())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


#: how the dispatcher says a backend has no kernel for an op (NotImplementedError), and
#: how it says so for a backend in Python (every __torch_dispatch__ returned NotImplemented)
_NO_KERNEL = re.compile(r"Could not run '(?P<op>[\w.:]+)' with arguments from the "
                        r"'(?P<backend>\w+)' backend"
                        r"|Multiple dispatch failed for '(?:torch\._ops\.)?(?P<ns>\w+)\."
                        r"(?P<name>\w+)\.(?P<overload>\w+)'; all __torch_dispatch__ handlers "
                        r"returned NotImplemented")


def _op_of(found: re.Match) -> str:
    if found.group("op"):
        return found.group("op")
    overload = found.group("overload")
    return f"{found.group('ns')}::{found.group('name')}" + (
        "" if overload == "default" else f".{overload}")


def missing_kernel(error: BaseException | str | None) -> str | None:
    """The op (``aten::mm``) the dispatcher found no kernel for on a backend, where the
    error, or one it was raised from or described in its message, says so; else None."""
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        found = _NO_KERNEL.search(str(error))
        if found:
            return _op_of(found)
        error = error.__cause__ or error.__context__
    found = _NO_KERNEL.search(error) if isinstance(error, str) else None
    return _op_of(found) if found else None
