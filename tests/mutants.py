"""Broken autocast planted in-process, and the assertions that a check catches it: shared by
the tests of the check families.

A planted bug is undone on exit, also when the test fails: a catalogue mutant
(:func:`mutant`), an ``Autocast<Device>`` kernel overridden from Python
(:func:`overridden`), or a monkeypatch of ``torch.amp`` (``plant_*``, undone by the
test's ``monkeypatch``). Imported as ``tests.mutants``: the root conftest.py puts the
checkout on ``sys.path``; tests/conftest.py has pytest rewrite its assertions.
"""

from __future__ import annotations

import contextlib
import threading
import types
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
from torch._C import DispatchKey, DispatchKeySet
from torch.amp import autocast_mode

from amp_conformance.checks.case import Case
from amp_conformance.checks.regions import machine as regions
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState, StateLeak
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist

CPU = Target("cpu")
FAKE_CUDA = Target("cuda", fake=True)


# -- planting ----------------------------------------------------------------------------


@contextlib.contextmanager
def mutant(name: str) -> Iterator[None]:
    """The selftest's mutant ``name`` applied for the block; undone, and the cpu autocast
    state put back, on exit."""
    before = AutocastState.capture("cpu")
    undo = mutants()[name].apply()
    try:
        yield
    finally:
        undo()
        before.restore()


@contextlib.contextmanager
def overridden(op: str, key: str, kernel: Callable) -> Iterator[None]:
    """Replace the ``key`` kernel of ``aten::op`` by ``kernel`` for the block (a vendor's
    broken kernel); destroying the library on exit restores PyTorch's own."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            lib.impl(op, kernel, key)
        yield
    finally:
        lib._destroy()


def below(key: str = "AutocastCPU") -> torch._C._ExcludeDispatchKeyGuard:
    """Run the op below the ``key`` dispatch key, as an autocast kernel does after casting."""
    return torch._C._ExcludeDispatchKeyGuard(DispatchKeySet(getattr(DispatchKey, key)))


def below_autocast(fn: Callable, *args, key: str = "AutocastCPU"):
    """``fn(*args)`` below the ``key`` dispatch key (:func:`below`)."""
    with below(key):
        return fn(*args)


class InheritingThread(threading.Thread):
    """A thread that starts with the autocast state (cpu) of the thread that made it."""

    def __init__(self, target=None, **kwargs):
        outer = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")

        def body():
            torch.set_autocast_enabled("cpu", outer[0])
            torch.set_autocast_dtype("cpu", outer[1])
            target()

        super().__init__(target=body, **kwargs)


def plant_inheriting_threads(monkeypatch) -> None:
    """Threads of the region machine inherit autocast state (only regions.py sees them)."""
    monkeypatch.setattr(regions, "threading", types.SimpleNamespace(Thread=InheritingThread))


def plant_undecorating_decorator(monkeypatch) -> None:
    """autocast used as a decorator returns the function as it was: no region."""
    monkeypatch.setattr(autocast_mode.autocast, "__call__", lambda self, func: func)


def case_of(device: str, entry_id: str, dtype: torch.dtype, fake: bool = False) -> Case:
    """The check case of the device's op-list entry ``entry_id``."""
    entry = next(e for e in oplist.load(device).entries if e.id == entry_id)
    return Case(Target(device, fake=fake), dtype, entry)


# -- asserting the catch -----------------------------------------------------------------


def fails(check: Callable, *args, words: tuple[str, ...] = ()) -> None:
    """``check(*args)`` fails the conformance check, its message naming every one of
    ``words``."""
    with pytest.raises(ConformanceFailure) as info:
        check(*args)
    for w in words:
        assert w in str(info.value), str(info.value)


def property_fails(run: Callable[[], None], property_name: str, *also: str) -> str:
    """``run()`` fails the property ``property_name``, its message naming ``also`` too."""
    with pytest.raises(ConformanceFailure) as info:
        run()
    message = str(info.value)
    assert property_name in message, message
    for text in also:
        assert text in message, f"{text!r} not in:\n{message}"
    return message


def suite_check_fails(check: Callable[[], None], *texts: str) -> str:
    """The suite check raises its own assertion (not the state-leak guard's) naming ``texts``."""
    with pytest.raises(AssertionError) as info:
        check()
    assert not isinstance(info.value, StateLeak), f"the guard fired first: {info.value}"
    for text in texts:
        assert text in str(info.value), f"{text!r} not in {info.value}"
    return str(info.value)
