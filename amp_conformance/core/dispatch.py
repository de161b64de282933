"""Which of a device's Autocast kernels a call enters, observed through the dispatcher.

A kernel is registered for every overload of the device's autocast policy on a dispatch
key above every Autocast key (``TESTING_ONLY_GenericWrapper``, which torch leaves empty);
it notes the overload when the call is about to reach the device's Autocast kernel and
passes the call on. The key is in a thread's dispatch set only while :meth:`recording`
is active, so outside a recording every call skips the observer entirely.

The per-entry verdict uses it (an op whose policy needs an Autocast kernel must enter one:
builtin type promotion can give the same dtypes as the promote policy, so dtypes alone
would pass a backend without the kernel), and so does ``coverage``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from amp_conformance.core import devices

#: A dispatch key above every Autocast key with no kernels of its own in torch: the
#: observer's slot. (A key below autocast would see the call after casting, and the
#: fp32_append_dtype kernels redispatch to another overload, e.g. norm.Scalar to
#: norm.ScalarOpt_dtype, so the entered overload would be lost.)
OBSERVER_KEY = "TESTING_ONLY_GenericWrapper"


def policy_overloads(device: str) -> list[str]:
    """Every op overload the running torch registers a kernel for under the device's key."""
    key = devices.dispatch_key(device)
    return sorted(
        name for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    )


def _op_overload(name: str) -> Any:
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


#: The observer key's fallthrough fallback, shared by every live observer (torch allows
#: one fallback per key): [library, number of observers using it].
_FALLBACK: list[Any] = [None, 0]


def _acquire_fallback() -> None:
    if _FALLBACK[1] == 0:
        library = torch.library.Library("_", "IMPL", OBSERVER_KEY)
        library.fallback(torch.library.fallthrough_kernel)
        _FALLBACK[0] = library
    _FALLBACK[1] += 1


def _release_fallback() -> None:
    _FALLBACK[1] -= 1
    if _FALLBACK[1] == 0:
        _FALLBACK[0]._destroy()
        _FALLBACK[0] = None


class Observer:
    """Records which of ``overloads`` have their ``Autocast<device>`` kernel entered.

    Use as a context manager (installs and, on exit, removes the observing kernels), and
    :meth:`recording` around the calls to observe.
    """

    def __init__(self, device: str, overloads: Sequence[str]):
        self.device = device
        self.key = devices.dispatch_key(device)
        self.overloads = list(overloads)
        self._seen: list[str] | None = None
        self._libraries: list[torch.library.Library] = []

    def _kernel(self, name: str) -> Callable[..., Any]:
        op = _op_overload(name)
        below = torch._C.DispatchKeySet(OBSERVER_KEY)

        def observe(*args: Any, **kwargs: Any) -> Any:
            if self._seen is not None and self._enters_autocast(name, args, kwargs):
                self._seen.append(name)
            with torch._C._ExcludeDispatchKeyGuard(below):
                return op(*args, **kwargs)

        return observe

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
        _acquire_fallback()
        try:
            by_namespace: dict[str, torch.library.Library] = {}
            for name in self.overloads:
                namespace, _, rest = name.partition("::")
                if namespace not in by_namespace:
                    by_namespace[namespace] = torch.library.Library(namespace, "IMPL")
                    self._libraries.append(by_namespace[namespace])
                by_namespace[namespace].impl(rest, self._kernel(name), OBSERVER_KEY)
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        while self._libraries:
            self._libraries.pop()._destroy()
        _release_fallback()

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
        # one device at a time: two observers' kernels for the same op on the one key would
        # hide each other (the dispatcher runs the latest registration only)
        release_shared()
        _SHARED[device] = Observer(device, policy_overloads(device)).__enter__()
    return _SHARED[device]


def release_shared() -> None:
    """Remove every shared observer's kernels (the registrations a run made)."""
    while _SHARED:
        _SHARED.popitem()[1].__exit__(None, None, None)
