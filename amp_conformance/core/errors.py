"""The one failure type of the suite, and how a failure or error is shown in one line."""

from __future__ import annotations

import contextlib
import gc
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


class ConformanceFailure(AssertionError):
    """An autocast behaviour that departs from what is expected."""


#: the user property an excused item carries: {mechanism, evidence} (plugin/excuses.py)
EXCUSE_PROPERTY = "amp_excuse"


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


#: the packages whose exceptions are never a backend's own words
_NOT_BACKEND = frozenset({"builtins", "torch", "amp_conformance", "_pytest", "pytest",
                          "hypothesis", "numpy", "pluggy"})
_ATEN = re.compile(r"\baten::[\w.]+")


def refused_op(error: BaseException | None) -> str | None:
    """The op (``aten::X``) that an exception of the backend's own class (one no package of
    torch, the suite or Python defines), raised or one it was raised from, names: the
    backend saying in its own words that it cannot run it; else None."""
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        if type(error).__module__.split(".")[0] not in _NOT_BACKEND:
            named = _ATEN.search(str(error))
            if named:
                return named.group(0)
        error = error.__cause__ or error.__context__
    return None


def chain(error: BaseException | None) -> Iterator[BaseException]:
    """The exception, those it was raised from or during, and the members of a group
    (Hypothesis reports several distinct failures as one), each once."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        exc = pending.pop(0)
        if not isinstance(exc, BaseException) or id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        pending.extend([exc.__cause__, exc.__context__,
                        *(getattr(exc, "exceptions", None) or ())])


_NUMBER = re.compile(r"0x[0-9a-fA-F]+|(?<![A-Za-z_0-9])\d+")  # float16's 16 is no number
#: the floating dtypes autocast moves a call between (the amp dtypes and float32; float64,
#: which it never touches, stays told apart)
_DTYPE = re.compile(r"\b(?:torch\.)?(?:b?float(?:16|32)|half|(?:c10::|at::k|ScalarType::)?"
                    r"(?:Half|BFloat16|Float)|b?f(?:16|32)|fp(?:16|32))\b")


@dataclass(frozen=True)
class Signature:
    """How a call failed: what the backend (or the check) raised, the op it names and its
    first line (with the next, where the first only introduces it: a check's verdict), numbers
    masked (ids, addresses, sizes differ per call), and in a backend's own error the amp
    dtypes and float32 too (its message spells the dtypes the call met, which autocast
    changed: XLA's ``bf16[8,8]``, ``f32[8,8]``); a check's verdict keeps them, being about
    them."""

    kind: str
    op: str | None
    line: str


def signature(error: BaseException) -> Signature:
    members = getattr(error, "exceptions", None)
    line = first_line(headline(str(error)), 300)  # the telling line
    if not isinstance(error, AssertionError):
        line = _DTYPE.sub("<dtype>", line)
    line = _NUMBER.sub("N", line)
    if members:  # Hypothesis's distinct failures: the group is the set of them
        line += " [" + "; ".join(sorted(str(signature(m)) for m in members)) + "]"
    return Signature(type(error).__name__, missing_kernel(error) or refused_op(error), line)


def same_way(original: BaseException, again: BaseException) -> bool:
    """Whether ``again`` is the failure ``original`` was, or one it was raised from, or the
    one its check quotes (``… raised Type: line``)."""
    want = signature(again)
    if any(signature(e) == want for e in chain(original)):
        return True
    quoted = _NUMBER.sub("N", " ".join(describe_error(again).split())[:120])
    return len(quoted) >= 24 and quoted in _NUMBER.sub("N", " ".join(str(original).split()))


def release_frames(error: BaseException | None) -> None:
    """Let go of what a failure's frames hold: its locals live as long as its traceback
    (pytest keeps the last one, Hypothesis its own), and among them may be a guard that
    changes the thread's state while it lives (torch's tensor printing turns torch.func off
    for its extent)."""
    for exc in chain(error):
        tb = exc.__traceback__
        while tb is not None:
            with contextlib.suppress(RuntimeError):  # a frame still executing keeps its own
                tb.tb_frame.clear()
                # Python 3.11 keeps a snapshot of the locals once read (pytest reads them for
                # __tracebackhide__): reading them again after clear() drops what it held
                tb.tb_frame.f_locals  # noqa: B018
            tb = tb.tb_next
    gc.collect()
