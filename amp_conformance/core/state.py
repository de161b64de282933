"""Snapshots of the state an item may change, so every check can prove it left none behind.

The one list of what the suite snapshots around an item (:class:`ItemState`): the autocast
state of every device type (:class:`AutocastState`), the thread's dispatch keys, transforms,
modes and print options (:class:`ThreadState`), and the global flags (:class:`Flags`): grad
mode, inference mode, the default dtype, deterministic algorithms, anomaly detection and
the fused attention paths. The per-item isolation compares it before and after an item
(what changed fails the item, restored), and an excuse's proof starts from the state the
item started from, never from the one its failure left.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.core import devices


def nesting() -> int:
    """The autocast nesting depth, read without leaving a trace."""
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


def autocast_device_types() -> tuple[str, ...]:
    """Every device type whose autocast state torch keeps here (the in-tree ones and the
    PrivateUse1 backend's current name); a type this torch cannot answer for is left out."""
    return _answering(devices.privateuse1_name())


@functools.cache
def _answering(privateuse1: str) -> tuple[str, ...]:
    """The device types torch answers for, the PrivateUse1 backend named ``privateuse1``
    (asked once per name: every item captures the state twice)."""
    found = []
    for device in dict.fromkeys([*devices.PROFILES, privateuse1]):
        try:
            torch.is_autocast_enabled(device)
            torch.get_autocast_dtype(device)
        except (RuntimeError, ValueError, TypeError):
            continue
        found.append(device)
    return tuple(found)


@dataclass(frozen=True)
class AutocastState:
    """The thread's whole autocast state: enabled flag and dtype of every device type,
    the cache flag and the nesting depth. ``device`` is the one under test (its fields are
    named first in a diff)."""

    device: str
    per_device: tuple[tuple[str, bool, torch.dtype], ...]
    cache_enabled: bool
    nesting: int

    @classmethod
    def capture(cls, device: str) -> AutocastState:
        types = dict.fromkeys([device, *autocast_device_types()])
        return cls(
            device=device,
            per_device=tuple(
                (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in types
            ),
            cache_enabled=torch.is_autocast_cache_enabled(),
            nesting=nesting(),
        )

    @property
    def enabled(self) -> bool:
        return self.per_device[0][1]

    @property
    def dtype(self) -> torch.dtype:
        return self.per_device[0][2]

    def restore(self) -> None:
        for device, enabled, dtype in self.per_device:
            torch.set_autocast_enabled(device, enabled)
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.cache_enabled)
        depth = nesting()
        while depth < self.nesting:
            depth = torch.autocast_increment_nesting()
        while depth > self.nesting:
            depth = torch.autocast_decrement_nesting()
        if depth == 0:
            torch.clear_autocast_cache()

    def diff(self, other: AutocastState) -> list[str]:
        """What changed from this state to ``other``, one phrase per field."""
        changes = []
        theirs = {d: (e, t) for d, e, t in other.per_device}
        for device, enabled, dtype in self.per_device:
            if device not in theirs:
                continue
            other_enabled, other_dtype = theirs[device]
            prefix = "" if device == self.device else f"{device} "
            if enabled != other_enabled:
                changes.append(f"{prefix}enabled: {enabled} before, {other_enabled} after")
            if dtype != other_dtype:
                changes.append(f"{prefix}dtype: {dtype} before, {other_dtype} after")
        for name in ("cache_enabled", "nesting"):
            if getattr(self, name) != getattr(other, name):
                changes.append(f"{name}: {getattr(self, name)} before, {getattr(other, name)} after")
        return changes


def _keys(keys: Any) -> frozenset[str]:
    """The names of a dispatch key set but autocast's (:class:`AutocastState` owns those)."""
    text = str(keys)
    names = text[text.find("(") + 1: text.rfind(")")].split(",")
    return frozenset(n.strip() for n in names if n.strip() and not n.strip().startswith("Autocast"))


@dataclass(frozen=True)
class ThreadState:
    """What else of the thread a failure can leave behind for every later item: dispatch
    keys included or excluded (a guard kept alive by a traceback: torch's tensor printing
    turns ``torch.func`` off while it lives), torch.func's interpreter stack, the mode
    stacks and the print options."""

    included: frozenset[str]
    excluded: frozenset[str]
    transforms: int
    dispatch_modes: int
    function_modes: int
    print_options: tuple[tuple[str, Any], ...]

    @classmethod
    def capture(cls) -> ThreadState:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        return cls(included=_keys(torch._C._dispatch_tls_local_include_set()),
                   excluded=_keys(torch._C._dispatch_tls_local_exclude_set()),
                   transforms=torch._C._functorch.get_dynamic_layer_stack_depth(),
                   dispatch_modes=len(_get_current_dispatch_mode_stack()),
                   function_modes=torch._C._len_torch_function_stack(),
                   print_options=tuple(sorted(vars(torch._tensor_str.PRINT_OPTS).items())))

    def diff(self, other: ThreadState) -> list[str]:
        """What changed from this state to ``other``, one phrase per field."""
        changes = []
        for name in ("included", "excluded"):
            mine, theirs = getattr(self, name), getattr(other, name)
            gained, lost = theirs - mine, mine - theirs
            if gained or lost:
                changes.append(f"dispatch keys {name}: " + ", ".join(
                    [f"+{k}" for k in sorted(gained)] + [f"-{k}" for k in sorted(lost)]))
        for name, what in (("transforms", "torch.func transforms active"),
                           ("dispatch_modes", "dispatch modes"),
                           ("function_modes", "torch function modes")):
            if getattr(self, name) != getattr(other, name):
                changes.append(f"{what}: {getattr(self, name)} before, {getattr(other, name)} after")
        if self.print_options != other.print_options:
            changes.append("print options changed")
        return changes

    def restore(self) -> None:
        """Put back what can be put back (keys, print options); modes and transforms left
        entered cannot be, and the diff names them."""
        now = ThreadState.capture()
        for name, setter in (("included", torch._C._dispatch_tls_set_dispatch_key_included),
                             ("excluded", torch._C._dispatch_tls_set_dispatch_key_excluded)):
            for key in getattr(now, name) ^ getattr(self, name):
                setter(getattr(torch._C.DispatchKey, key), key in getattr(self, name))
        for field_name, value in self.print_options:
            setattr(torch._tensor_str.PRINT_OPTS, field_name, value)


class StateLeak(AssertionError):
    pass


@contextlib.contextmanager
def unchanged_autocast_state(device: str, what: str) -> Iterator[AutocastState]:
    """Assert the autocast state after the block equals the state before; always restore it."""
    before = AutocastState.capture(device)
    failed = False
    try:
        yield before
    except BaseException:
        failed = True
        raise
    finally:
        after = AutocastState.capture(device)
        before.restore()
        if not failed:
            changes = before.diff(after)
            if changes:
                raise StateLeak(f"autocast state changed by {what}: " + "; ".join(changes))


@contextlib.contextmanager
def grad_and_dtype_restored() -> Iterator[None]:
    """Restore grad mode and the default dtype, which checks may touch."""
    grad = torch.is_grad_enabled()
    default = torch.get_default_dtype()
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(default)


@dataclass(frozen=True)
class Flags:
    """The global and thread flags an item may turn and forget: grad mode, inference mode,
    the default dtype, deterministic algorithms (and warn-only), anomaly detection, and
    ``torch.backends.mha``'s fast paths."""

    grad: bool
    inference: bool
    default_dtype: torch.dtype
    deterministic: bool
    deterministic_warn_only: bool
    anomaly: bool
    fast_paths: bool

    @classmethod
    def capture(cls) -> Flags:
        return cls(grad=torch.is_grad_enabled(), inference=torch.is_inference_mode_enabled(),
                   default_dtype=torch.get_default_dtype(),
                   deterministic=torch.are_deterministic_algorithms_enabled(),
                   deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                   anomaly=torch.is_anomaly_enabled(),
                   fast_paths=torch.backends.mha.get_fastpath_enabled())

    def diff(self, other: Flags) -> list[str]:
        names = {"grad": "grad mode", "inference": "inference mode",
                 "default_dtype": "default dtype", "deterministic": "deterministic algorithms",
                 "deterministic_warn_only": "deterministic algorithms warn-only",
                 "anomaly": "anomaly detection", "fast_paths": "torch.backends.mha fast paths"}
        return [f"{what}: {getattr(self, name)} before, {getattr(other, name)} after"
                for name, what in names.items() if getattr(self, name) != getattr(other, name)]

    def restore(self) -> None:
        """Put back what can be put back; inference mode left entered cannot be (its guard
        lives where it was made), and the diff names it."""
        torch.set_grad_enabled(self.grad)
        torch.set_default_dtype(self.default_dtype)
        torch.use_deterministic_algorithms(self.deterministic,
                                           warn_only=self.deterministic_warn_only)
        torch.set_anomaly_enabled(self.anomaly)
        torch.backends.mha.set_fastpath_enabled(self.fast_paths)


@dataclass(frozen=True)
class ItemState:
    """Everything the suite snapshots around an item, for ``device``."""

    autocast: AutocastState
    thread: ThreadState
    flags: Flags

    @classmethod
    def capture(cls, device: str) -> ItemState:
        return cls(AutocastState.capture(device), ThreadState.capture(), Flags.capture())

    def diff(self, other: ItemState) -> list[str]:
        """What changed from this state to ``other``, one phrase per field."""
        return (self.autocast.diff(other.autocast) + self.thread.diff(other.thread)
                + self.flags.diff(other.flags))

    def restore(self) -> None:
        self.flags.restore()  # grad mode first: restoring autocast calls no op, but be safe
        self.autocast.restore()
        self.thread.restore()
