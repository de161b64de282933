"""Autocast regions: nesting, enabled=False subregions, another dtype inside, defaults."""

import contextlib
from collections.abc import Iterator

import pytest
import torch

from amp_conformance.core import devices
from amp_conformance.core.probes import probe
from amp_conformance.core.state import AutocastState, unchanged_autocast_state

pytestmark = pytest.mark.amp_check("regions")


def _observe(target, dtype_when_fake=None):
    return (
        torch.is_autocast_enabled(target.device),
        torch.get_autocast_dtype(target.device),
        probe(target.device),
    )


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


def test_region_sets_and_restores_state(amp_target, amp_dtype):
    dev = amp_target.device
    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state, \
            amp_target.tensors():
        before = _observe(amp_target)
        with amp_target.autocast(amp_dtype):
            inside = _observe(amp_target)
        after = _observe(amp_target)
        # Asserted inside the guard: on leaving it, the guard reports any leaked state
        # itself (and restores it), so an assertion placed after it could never fire.
        assert inside == (True, amp_dtype, amp_dtype), f"inside the region: {inside}"
        assert after == before, (f"state after the region {after} differs from before "
                                 f"{before}: {_changes(state, dev)}")


def test_disabled_subregion_restores_outer(amp_target, amp_dtype):
    dev = amp_target.device
    with unchanged_autocast_state(dev, "the check"), amp_target.tensors():
        with amp_target.autocast(amp_dtype):
            with amp_target.autocast(amp_dtype, enabled=False):
                inner = _observe(amp_target)
            outer = _observe(amp_target)
    assert inner[0] is False and inner[2] == torch.float32, f"enabled=False subregion: {inner}"
    assert outer == (True, amp_dtype, amp_dtype), f"after the enabled=False subregion: {outer}"


def test_other_dtype_subregion_restores_outer(amp_target, amp_dtype):
    dev = amp_target.device
    others = [d for d in devices.supported_amp_dtypes(dev, amp_target.fake) if d != amp_dtype]
    if not others:
        pytest.skip(f"{dev} supports only {amp_dtype}: no other dtype to nest")
    other = others[0]
    with unchanged_autocast_state(dev, "the check"), amp_target.tensors():
        with amp_target.autocast(amp_dtype):
            with amp_target.autocast(other):
                inner = _observe(amp_target)
            outer = _observe(amp_target)
    assert inner == (True, other, other), f"nested {other} region: {inner}"
    assert outer == (True, amp_dtype, amp_dtype), f"after the nested {other} region: {outer}"


def test_cache_flag_restored_after_subregion(amp_target, amp_dtype):
    dev = amp_target.device
    with unchanged_autocast_state(dev, "the check"):
        with amp_target.autocast(amp_dtype, cache_enabled=True):
            with amp_target.autocast(amp_dtype, cache_enabled=False):
                inner = torch.is_autocast_cache_enabled()
            outer = torch.is_autocast_cache_enabled()
    assert (inner, outer) == (False, True), f"cache flag inner {inner}, after inner {outer}"


def test_state_restored_when_body_raises(amp_target, amp_dtype):
    dev = amp_target.device
    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state:
        before = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        with pytest.raises(KeyError):
            with amp_target.autocast(amp_dtype):
                raise KeyError("inside")
        after = (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev))
        # Inside the guard, which would otherwise report the leak first (less precisely).
        assert after == before, (f"state after an exception in the region: {after}, before "
                                 f"{before}: {_changes(state, dev)}")


def test_decorator_form(amp_target, amp_dtype):
    dev = amp_target.device
    if amp_target.fake:
        pytest.skip("not applicable in --fake mode: the decorator form is torch.autocast itself")

    @torch.autocast(dev, dtype=amp_dtype)
    def body():
        return torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)

    with unchanged_autocast_state(dev, "the check"), _autocast_off(dev) as state:
        inside = body()
        after = torch.is_autocast_enabled(dev)
        # Inside the guard, which would otherwise report the leak first (less precisely).
        assert not after, ("autocast is still enabled after the decorated function returned: "
                           f"{_changes(state, dev)}")
    assert inside == (True, amp_dtype), (
        f"a function decorated with torch.autocast({dev!r}, dtype={amp_dtype}) ran with "
        f"(enabled, dtype) = {inside}, expected {(True, amp_dtype)}"
    )


def test_default_autocast_dtype(amp_settings, amp_target, amp_dtype):
    """torch.get_autocast_dtype and torch.autocast(device) without dtype use the device default."""
    from amp_conformance.checks.case import load_oplist

    dev = amp_target.device
    recorded = load_oplist(dev, amp_settings.oplists).default_amp_dtype
    if recorded is None:
        pytest.skip(f"no op list records the default autocast dtype of {dev}")
    expected = getattr(torch, recorded)
    assert torch.get_autocast_dtype(dev) == expected, (
        f"torch.get_autocast_dtype({dev!r}) is {torch.get_autocast_dtype(dev)}, expected {expected}"
    )
    if amp_target.fake:
        pytest.skip("not applicable in --fake mode: torch.autocast() needs the device")
    with unchanged_autocast_state(dev, "the check"):
        with torch.autocast(dev):
            got = (torch.get_autocast_dtype(dev), probe(dev))
    assert got == (expected, expected), f"torch.autocast({dev!r}) without dtype ran in {got}"
