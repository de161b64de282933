"""Calls intercepted through the dispatcher above every Autocast key: which of a device's
Autocast kernels a call enters (observers), and calls of ops that must not reach the device
(fences).

A kernel is registered per overload on a dispatch key above every Autocast key
(``TESTING_ONLY_GenericWrapper``, which torch leaves empty); it tells every live observer
and fence about the call and passes it on below itself. The key is in a thread's dispatch
set only while :meth:`Observer.recording` or :func:`fenced` is active, so outside them every
call skips these kernels entirely. Being above every key a backend registers on, the fence
holds however the backend's kernels are registered (in C++, from Python, as a boxed
fallback, or as a Python dispatch mode).

The per-entry verdict uses the observer (an op whose policy needs an Autocast kernel must
enter one: builtin type promotion can give the same dtypes as the promote policy, so dtypes
alone would pass a backend without the kernel), and so does ``coverage``; the quarantine
(``core.quarantine``) uses the fence.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from amp_conformance.core import devices

#: A dispatch key above every Autocast key with no kernels of its own in torch: the
#: observers' and fences' slot. (A key below autocast would see the call after casting, and the
#: fp32_append_dtype kernels redispatch to another overload, e.g. norm.Scalar to
#: norm.ScalarOpt_dtype, so the entered overload would be lost.)
OBSERVER_KEY = "TESTING_ONLY_GenericWrapper"


def registered_overloads(device: str) -> list[str]:
    """Every op name the running torch has a kernel for under the device's Autocast key,
    callable or not (a backend may register kernels for ops of a library not loaded)."""
    key = devices.dispatch_key(device)
    return sorted(
        name for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    )


def policy_overloads(device: str) -> list[str]:
    """Every op overload of the device's autocast policy that can be called: a kernel under
    the device's key for an op whose schema this process knows. Kernels for ops that cannot
    be resolved are :func:`foreign_registrations`; nothing else in the suite sees them."""
    return [name for name in registered_overloads(device) if unresolvable(name) is None]


def foreign_registrations(device: str) -> dict[str, str]:
    """The device's Autocast kernels for ops that cannot be called here, each with why:
    ``{"ghostlib::ghost_op": "no schema: ..."}``."""
    found = {name: unresolvable(name) for name in registered_overloads(device)}
    return {name: why for name, why in found.items() if why is not None}


def unresolvable(name: str) -> str | None:
    """Why ``ns::op.overload`` cannot be called from Python here, or None when it can.

    A kernel can be registered for a name no library defined (``Library(ns, "IMPL")``
    before, or without, the ``def``): the dispatcher lists the name, but it has no schema,
    so ``torch.ops`` cannot build it."""
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"{namespace}::{op}", overload)
    except RuntimeError:
        return ("no schema: a kernel was registered for it, but no library in this process "
                f"defines it (is the library of namespace '{namespace}' imported?)")
    try:
        op_overload(name)
    except (AttributeError, RuntimeError) as exc:
        return f"torch.ops cannot resolve it: {type(exc).__name__}: {exc}"
    return None


def op_overload(name: str) -> Any:
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


#: The observer key's registrations, shared by every live observer and fence: torch allows
#: one fallback per key and one Python kernel per (op, key) (a second library registering
#: the same kernel is refused, "This is not allowed since there's already a kernel
#: registered from python", on torch 2.11, and hides the first on 2.13). So there is one
#: kernel per overload, telling every live observer and fence, registered the first time
#: one watches the overload and removed with the rest when the last one goes. It passes the
#: call on below the key (not by excluding the key), so the calls the op makes in turn are
#: seen too: a fenced op reached through a composite still meets its fence.
_LIVE: list[Observer] = []
#: overload name -> the fences' checks, each raising to stop the call
_FENCES: dict[str, list[Callable[[str, tuple, dict], None]]] = {}
#: the overloads some observer watches: observers see the calls made from outside them only
#: (an op's own calls, e.g. stack's cat, are not the entry's call), fences every call
_OBSERVED: set[str] = set()
_INSIDE = threading.local()
_LIBRARIES: dict[str | None, torch.library.Library] = {}  # namespace (None: the fallback)
_KERNELS: set[str] = set()


def _library(namespace: str) -> torch.library.Library:
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "IMPL")
    return _LIBRARIES[namespace]


def _shared_kernel(name: str) -> Callable[..., Any]:
    op = op_overload(name)
    below = torch._C._dispatch_keyset_full_after(OBSERVER_KEY)

    def intercept(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        for check in tuple(_FENCES.get(name, ())):
            check(name, args, kwargs)
        if name not in _OBSERVED:
            return op.redispatch(keyset & below, *args, **kwargs)
        if not getattr(_INSIDE, "depth", 0):
            for observer in tuple(_LIVE):
                observer._note(name, args, kwargs)
        _INSIDE.depth = getattr(_INSIDE, "depth", 0) + 1
        try:
            return op.redispatch(keyset & below, *args, **kwargs)
        finally:
            _INSIDE.depth -= 1

    return intercept


def _register(names: Sequence[str]) -> None:
    if None not in _LIBRARIES:
        fallback = torch.library.Library("_", "IMPL", OBSERVER_KEY)
        fallback.fallback(torch.library.fallthrough_kernel)
        _LIBRARIES[None] = fallback
    for name in names:
        if name not in _KERNELS:
            namespace, _, rest = name.partition("::")
            _library(namespace).impl(rest, _shared_kernel(name), OBSERVER_KEY, with_keyset=True)
            _KERNELS.add(name)


def _release_unused() -> None:
    if not _LIVE:
        _OBSERVED.clear()
    if not _LIVE and not _FENCES:
        while _LIBRARIES:
            _LIBRARIES.popitem()[1]._destroy()
        _KERNELS.clear()


def _attach(observer: Observer) -> None:
    _LIVE.append(observer)
    try:
        _register(observer.overloads)
        _OBSERVED.update(observer.overloads)
    except BaseException:
        _detach(observer)
        raise


def _detach(observer: Observer) -> None:
    if observer in _LIVE:
        _LIVE.remove(observer)
    _release_unused()


def fence(overloads: Sequence[str], check: Callable[[str, tuple, dict], None]) -> None:
    """Call ``check(overload, args, kwargs)`` before every call of ``overloads`` made inside
    :func:`fenced`; it raises to stop the call. Kept until :func:`unfence`."""
    for name in overloads:
        _FENCES.setdefault(name, []).append(check)
    try:
        _register(overloads)
    except BaseException:
        unfence()
        raise


def unfence() -> None:
    """Remove every fence."""
    _FENCES.clear()
    _release_unused()


@contextlib.contextmanager
def calls_of(overloads: Sequence[str]) -> Iterator[list[str]]:
    """Every call of ``overloads`` made inside the block (this thread), in call order,
    whether or not autocast is on: which path a module took (its fused kernel, or not)."""
    seen: list[str] = []

    def note(name: str, args: tuple, kwargs: dict) -> None:
        seen.append(name)

    fence(overloads, note)
    try:
        with torch._C._IncludeDispatchKeyGuard(OBSERVER_KEY):
            yield seen
    finally:
        for name in overloads:
            checks = _FENCES.get(name, [])
            if note in checks:
                checks.remove(note)
            if not checks:
                _FENCES.pop(name, None)
        _release_unused()


def fenced() -> contextlib.AbstractContextManager[Any]:
    """The fences hold inside the block (in its thread, and autograd's for its backward)."""
    if not _FENCES:
        return contextlib.nullcontext()
    return torch._C._IncludeDispatchKeyGuard(OBSERVER_KEY)


class Observer:
    """Records which of ``overloads`` have their ``Autocast<device>`` kernel entered.

    Use as a context manager (installs and, on exit, removes the observing kernels; any
    number of observers may be live at once, for one device or several), and
    :meth:`recording` around the calls to observe.
    """

    def __init__(self, device: str, overloads: Sequence[str]):
        self.device = device
        self.key = devices.dispatch_key(device)
        self.overloads = list(overloads)
        self._watched = frozenset(self.overloads)
        self._seen: list[str] | None = None

    def _note(self, name: str, args: tuple, kwargs: dict) -> None:
        if (self._seen is not None and name in self._watched
                and self._enters_autocast(name, args, kwargs)):
            self._seen.append(name)

    def _enters_autocast(self, name: str, args: tuple, kwargs: dict) -> bool:
        """Whether this call reaches a kernel of the device's autocast next: autocast is on
        for the device (its key is not excluded), some tensor argument carries the key, and
        the kernel there is not a fallthrough (which would pass the call on untouched)."""
        if torch._C._dispatch_tls_is_dispatch_key_excluded(self.key):
            return False
        if torch._C._dispatch_kernel_for_dispatch_key_is_fallthrough(name, self.key):
            return False
        return any(
            isinstance(t, torch.Tensor) and torch._C._dispatch_keys(t).has(self.key)
            for t in tree_leaves((args, kwargs))
        )

    def __enter__(self) -> Observer:
        _attach(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _detach(self)

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[str]]:
        """Collect, in call order, the policy overloads entered inside the block."""
        seen: list[str] = []
        previous, self._seen = self._seen, seen
        try:
            with torch._C._IncludeDispatchKeyGuard(OBSERVER_KEY):
                yield seen
        finally:
            self._seen = previous


_SHARED: dict[str, Observer] = {}


def shared_observer(device: str) -> Observer:
    """One observer for the process (for one device at a time), installed on first use (registering the
    kernels costs milliseconds; a run observes hundreds of calls). :func:`release_shared`
    removes them; the plugin calls it when the session ends."""
    if device not in _SHARED:
        release_shared()  # one device at a time: the registrations stay those of one policy
        _SHARED[device] = Observer(device, policy_overloads(device)).__enter__()
    return _SHARED[device]


def release_shared() -> None:
    """Remove every shared observer's kernels (the registrations a run made)."""
    while _SHARED:
        _SHARED.popitem()[1].__exit__(None, None, None)
