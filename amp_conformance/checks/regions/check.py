"""Autocast regions, case by case: a region sets and restores the state, an enabled=False
or other-dtype subregion restores the outer one, the cache flag, an exception in the body,
the decorator form and the device's default dtype. Each raises
:class:`ConformanceFailure` naming what the state was, or :class:`NotApplicable`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.probes import probe
from amp_conformance.core.state import AutocastState, unchanged_autocast_state
from amp_conformance.core.target import Target


def _observe(target: Target) -> tuple[bool, torch.dtype, torch.dtype]:
    return (torch.is_autocast_enabled(target.device), torch.get_autocast_dtype(target.device),
            probe(target.device))


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceFailure(message)


@contextlib.contextmanager
def _autocast_off(device: str) -> Iterator[AutocastState]:
    """Autocast of ``device`` off, set directly (not through torch.autocast, the code under
    test), whatever the item found: a state leaked before the item (by a broken __exit__
    at session start) cannot hide the same leak here. Yields that state; puts the found
    one back."""
    found = AutocastState.capture(device)
    torch.set_autocast_enabled(device, False)
    try:
        yield AutocastState.capture(device)
    finally:
        found.restore()


def _changes(before: AutocastState, device: str) -> str:
    """What changed since ``before``, worded as the state-leak guard words it."""
    return "autocast state changed by the check: " + "; ".join(
        before.diff(AutocastState.capture(device)))


def check_sets_and_restores(target: Target, amp_dtype: torch.dtype) -> None:
    dev = target.device
    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state, \
            target.tensors():
        before = _observe(target)
        with target.autocast(amp_dtype):
            inside = _observe(target)
        after = _observe(target)
        # Checked inside the guard: on leaving it, the guard reports any leaked state
        # itself (and restores it), so a check placed after it could never fire.
        _require(inside == (True, amp_dtype, amp_dtype), f"inside the region: {inside}")
        _require(after == before, f"state after the region {after} differs from before "
                                  f"{before}: {_changes(state, dev)}")


def check_disabled_subregion(target: Target, amp_dtype: torch.dtype) -> None:
    with unchanged_autocast_state(target.device, "the check"), target.tensors():
        with target.autocast(amp_dtype):
            with target.autocast(amp_dtype, enabled=False):
                inner = _observe(target)
            outer = _observe(target)
    _require(inner[0] is False and inner[2] == torch.float32, f"enabled=False subregion: {inner}")
    _require(outer == (True, amp_dtype, amp_dtype), f"after the enabled=False subregion: {outer}")


def check_other_dtype_subregion(target: Target, amp_dtype: torch.dtype) -> None:
    dev = target.device
    others = [d for d in devices.supported_amp_dtypes(dev, target.fake) if d != amp_dtype]
    if not others:
        raise NotApplicable(f"{dev} supports only {amp_dtype}: no other dtype to nest")
    other = others[0]
    with unchanged_autocast_state(dev, "the check"), target.tensors():
        with target.autocast(amp_dtype):
            with target.autocast(other):
                inner = _observe(target)
            outer = _observe(target)
    _require(inner == (True, other, other), f"nested {other} region: {inner}")
    _require(outer == (True, amp_dtype, amp_dtype), f"after the nested {other} region: {outer}")


def check_cache_flag_restored(target: Target, amp_dtype: torch.dtype) -> None:
    with unchanged_autocast_state(target.device, "the check"):
        with target.autocast(amp_dtype, cache_enabled=True):
            with target.autocast(amp_dtype, cache_enabled=False):
                inner = torch.is_autocast_cache_enabled()
            outer = torch.is_autocast_cache_enabled()
    _require((inner, outer) == (False, True), f"cache flag inner {inner}, after inner {outer}")


def check_restored_when_body_raises(target: Target, amp_dtype: torch.dtype) -> None:
    dev = target.device
    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state:
        before = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        try:
            with target.autocast(amp_dtype):
                raise KeyError("inside")
        except KeyError:
            pass
        else:  # a region that swallows its body's exception
            raise ConformanceFailure("the region swallowed the KeyError raised in its body")
        after = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        # Inside the guard, which would otherwise report the leak first (less precisely).
        _require(after == before, f"state after an exception in the region: {after}, before "
                                  f"{before}: {_changes(state, dev)}")


def check_decorator_form(target: Target, amp_dtype: torch.dtype) -> None:
    dev = target.device
    if target.fake:
        raise NotApplicable("not applicable in --fake mode: the decorator form is "
                            "torch.autocast itself")

    @torch.autocast(dev, dtype=amp_dtype)
    def body() -> tuple[bool, torch.dtype]:
        return torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)

    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state:
        inside = body()
        after = torch.is_autocast_enabled(dev)
        # Inside the guard, which would otherwise report the leak first (less precisely).
        _require(not after, "autocast is still enabled after the decorated function "
                            f"returned: {_changes(state, dev)}")
    _require(inside == (True, amp_dtype),
             f"a function decorated with torch.autocast({dev!r}, dtype={amp_dtype}) ran with "
             f"(enabled, dtype) = {inside}, expected {(True, amp_dtype)}")


def check_default_dtype(target: Target, recorded: str | None) -> None:
    """torch.get_autocast_dtype and torch.autocast(device) without dtype use the device's
    default, the one its op list records (``recorded``)."""
    dev = target.device
    if recorded is None:
        raise NotApplicable(f"no op list records the default autocast dtype of {dev}")
    expected = getattr(torch, recorded)
    _require(torch.get_autocast_dtype(dev) == expected,
             f"torch.get_autocast_dtype({dev!r}) is {torch.get_autocast_dtype(dev)}, "
             f"expected {expected}")
    if target.fake:
        raise NotApplicable("not applicable in --fake mode: torch.autocast() needs the device")
    with unchanged_autocast_state(dev, "the check"):
        with torch.autocast(dev):
            got = (torch.get_autocast_dtype(dev), probe(dev))
    _require(got == (expected, expected), f"torch.autocast({dev!r}) without dtype ran in {got}")
