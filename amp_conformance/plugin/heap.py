"""torch's import, with the garbage collector paused and what it left frozen.

In a fresh process the plugin's import is torch's first: the collector walked the growing
heap several times meanwhile, and again in young passes until the items were collected.
Here it is paused for that import, and what the import left is frozen after it
(:func:`gc.freeze`) and held: the session that collects conformance items claims it as its
own frozen heap (``plugin/processes.py``); any other run is given it back, unfrozen, once
its items are collected (an xdist controller: at its session's end). Not a pytest plugin
(it has no hooks): the plugin's package imports it before torch.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator

#: the process that froze the heap torch's import left, while no session has claimed it
#: (a process forked from it did not freeze it: that heap is someone else's there)
_HELD: list[int] = []


@contextlib.contextmanager
def import_frozen() -> Iterator[None]:
    """The block imports torch: the collector is paused for it and what it left is frozen
    after it. Nothing is done where torch is imported already, the collector is off or
    someone else froze the heap."""
    if "torch" in sys.modules or not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
    gc.freeze()
    _HELD.append(os.getpid())


def claim() -> bool:
    """Whether the heap torch's import left is frozen and held: a session claims it (it
    unfreezes the heap itself at its end)."""
    held = _HELD == [os.getpid()]
    _HELD.clear()
    return held


def release() -> None:
    """Give the collector back the heap torch's import left, where no session claimed it."""
    if claim():
        gc.unfreeze()
