"""Warnings are part of the verdict: autocast machinery that warns on a public path fails
the item that met it, unless the reference gives the same warning.

A conformance item's call is run with every warning it shows recorded (under the filters
in force: pytest's, the user's). One that comes from the
autocast machinery (raised in ``torch.amp``, a ``torch.<device>.amp`` module or
``torch.utils.checkpoint``, or naming autocast, GradScaler or custom_fwd/custom_bwd) fails
a passing item, named with its category and first line, unless it is one the reference
gives for the calls it deprecates or refuses (read once per process by making those calls:
``torch.<device>.amp.autocast``, ``GradScaler``, ``custom_fwd``/``custom_bwd``,
``torch.autocast`` of a device this machine lacks or of a dtype no device's autocast has;
never typed here) and it points at the caller's line, or at the line of torch the
reference itself warned from, never by its words alone: the same deprecation raised from
elsewhere inside torch is the machinery itself calling what it deprecates (checkpoint's
recompute entering a legacy autocast), and from a backend's own module it is words
borrowed. Every recorded
warning is warned again after the call, so pytest's own summary still lists it. The
wrapper tier is left out: its calls are a library's code, whose own warnings are its own.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import torch

from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.plugin.items import check_of, is_conformance
from amp_conformance.plugin.session_settings import settings

_TORCH = os.path.dirname(torch.__file__)
_MACHINERY_FILES = re.compile(r"[/\\](amp[/\\]|utils[/\\]checkpoint\.py$)")
_MACHINERY_WORDS = re.compile(r"\b(autocast|GradScaler|custom_fwd|custom_bwd)\b")
_DIGITS = re.compile(r"\d+")
#: (category, message with its numbers masked) of the reference's own warnings, each with
#: the places inside torch it gave them from (a warning of torch's own line, not a caller's)
_REFERENCE: dict[str, dict[tuple[type, str], frozenset[tuple[str, int]]]] = {}


def _key(w: warnings.WarningMessage) -> tuple[type, str]:
    return w.category, _DIGITS.sub("N", str(w.message))


def _in_torch(w: warnings.WarningMessage) -> bool:
    return os.path.abspath(w.filename).startswith(_TORCH)


#: packages whose warning classes are never the machinery's (the suite's own notes)
_NOT_MACHINERY = frozenset({"amp_conformance", "_pytest", "pytest", "pluggy", "hypothesis"})


def machinery(w: warnings.WarningMessage) -> bool:
    """Whether autocast's machinery gave the warning (by where, or by what it names)."""
    if w.category.__module__.split(".")[0] in _NOT_MACHINERY:
        return False
    return bool(_in_torch(w) and _MACHINERY_FILES.search(w.filename)
                or _MACHINERY_WORDS.search(str(w.message)))


def _reference_calls(device: str) -> Iterator[Any]:
    """The calls whose warnings are the reference's own: its deprecated entry points and
    autocast of a device this machine lacks."""
    for name in ("cuda", "cpu", device):
        amp = getattr(getattr(torch, name, None), "amp", None)
        for entry in ("autocast", "GradScaler"):
            if amp is not None and hasattr(amp, entry):
                yield lambda amp=amp, entry=entry: getattr(amp, entry)()
        for entry in ("custom_fwd", "custom_bwd"):
            if amp is not None and hasattr(amp, entry):
                yield lambda amp=amp, entry=entry: getattr(amp, entry)(lambda *a: a)
    for name in ("cuda", "xpu", "mps", device):
        yield lambda name=name: torch.autocast(name)
    yield lambda: torch.autocast(device, dtype=torch.float64)  # no device's autocast dtype
    yield lambda: torch.amp.GradScaler(device)


def reference(device: str) -> dict[tuple[type, str], frozenset[tuple[str, int]]]:
    """What the reference warns for those calls (read once per process), each with where it
    warned from: its caller's line (:data:`CALLER`), or places inside torch."""
    if device not in _REFERENCE:
        seen: dict[tuple[type, str], set[tuple[str, int]]] = {}
        for call in _reference_calls(device):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    call()
                except Exception:  # noqa: BLE001 - a call this torch refuses warns nothing
                    pass
            for w in caught:
                places = seen.setdefault(_key(w), set())
                if _in_torch(w):
                    places.add(_place(w))
                elif os.path.abspath(w.filename) == os.path.abspath(__file__):
                    places.add(CALLER)  # it points at the line that called it: ours here
        _REFERENCE[device] = {key: frozenset(places) for key, places in seen.items()}
    return _REFERENCE[device]


#: where a reference warning that points at its caller's line is said to come from
CALLER = ("<the caller's line>", 0)
_SUITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _place(w: warnings.WarningMessage) -> tuple[str, int]:
    """Where a warning comes from: a line of torch, or a line of the suite's own checks
    calling what the reference deprecates (:data:`CALLER`); anywhere else (a backend's
    module repeating the words) is no place the reference warns from."""
    path = os.path.abspath(w.filename)
    if _in_torch(w):
        return path, w.lineno
    return CALLER if path.startswith(_SUITE + os.sep) else (path, w.lineno)


#: checks whose calls are a library's code, whose own warnings are the library's to give
_LIBRARY_CODE = frozenset({"wrappers"})


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # noqa: ANN201
    if not is_conformance(item) or check_of(item) in _LIBRARY_CODE:
        return (yield)
    distinct: dict[tuple[Any, ...], warnings.WarningMessage] = {}

    def record(message: Any, category: type, filename: str, lineno: int, *rest: Any) -> None:
        w = warnings.WarningMessage(message, category, filename, lineno)
        distinct.setdefault((_key(w), filename, lineno), w)
    try:
        with warnings.catch_warnings():  # the filters in force decide what is shown
            warnings.showwarning = record
            result = yield
    finally:
        for w in distinct.values():  # for pytest's own summary, as if never recorded here
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    found = departures(item.config, distinct.values())
    if found:
        raise ConformanceFailure("the call warned where the reference gives no such warning: "
                                 + "; ".join(f"{w.category.__name__}: {first_line(w.message)} "
                                             f"({os.path.basename(w.filename)}:{w.lineno})"
                                             for w in found))
    return result


def departures(config: pytest.Config, caught: Iterable[warnings.WarningMessage]
               ) -> list[warnings.WarningMessage]:
    """The machinery's warnings among ``caught`` that the reference does not give from where
    they come: its words are not enough. The reference's deprecations point at their
    caller, which in an item is the suite's own check (from inside torch, it is the
    machinery calling what it deprecates; from a backend's module, words borrowed); its
    other warnings come from its own lines of torch (an autocast of a dtype the device
    lacks warns from its own line)."""
    allowed = reference(settings(config).device)
    return [w for w in caught if machinery(w) and _place(w) not in allowed.get(_key(w), ())]
