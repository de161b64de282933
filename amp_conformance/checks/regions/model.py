"""The model the region state machine checks torch against: autocast state as a stack.

Pure data and arithmetic (no torch calls but dtype constants and the device's supported
dtypes), so the model can be read, and tested, apart from the machine that drives torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from amp_conformance.core import devices
from amp_conformance.schema.versions import release


@dataclass(frozen=True)
class Region:
    """The arguments of one autocast region."""

    device: str
    dtype: torch.dtype | None = None
    enabled: bool = True
    cache_enabled: bool | None = None

    def __repr__(self) -> str:
        return (f"Region({self.device!r}, dtype={self.dtype}, enabled={self.enabled}, "
                f"cache_enabled={self.cache_enabled})")


@dataclass(frozen=True)
class DeviceState:
    enabled: bool
    dtype: torch.dtype

    def probe_dtype(self) -> torch.dtype:
        """What torch.mm of float32 inputs returns: the autocast dtype only when enabled."""
        return self.dtype if self.enabled else torch.float32


@dataclass(frozen=True)
class ModelState:
    """The thread's autocast state, as the open regions determine it."""

    devices: dict[str, DeviceState]
    cache_enabled: bool
    nesting: int


#: the release from which torch.autocast checks the dtype only when ``enabled`` on every
#: device (before it, on cpu alone: torch/amp/autocast_mode.py of 2.9 against 2.13)
DTYPE_CHECK_NEEDS_ENABLED = "2.10"


def warns_disabled(rejecting: frozenset[str]) -> frozenset[str]:
    """The rejecting devices whose torch.autocast warns for an unsupported dtype even with
    ``enabled=False``: every one but cpu before torch 2.10."""
    if release() >= DTYPE_CHECK_NEEDS_ENABLED:
        return frozenset()
    return frozenset(d for d in rejecting if d != "cpu")


def accepted_dtypes(device: str) -> tuple[torch.dtype, ...]:
    """The dtypes torch.autocast accepts for ``device`` before it warns and disables."""
    if device == devices.privateuse1_name():
        module = devices.device_module(device)
        getter = getattr(module, "get_amp_supported_dtype", None)
        if getter is not None:
            return tuple(getter())
    return devices.LOWER_DTYPES


@dataclass
class RegionsModel:
    """Autocast state as a stack: entering pushes the new state, leaving pops it.

    ``rejecting`` names the device types whose entry point warns and disables autocast
    for a dtype it does not accept (torch.autocast on every device but cuda, which only
    refuses bfloat16 where the hardware lacks it); ``warns_disabled`` those of them whose
    check runs even for ``enabled=False`` (every one but cpu before torch 2.10, whose
    torch.autocast tested the dtype before ``enabled``).
    """

    initial: ModelState
    rejecting: frozenset[str] = frozenset()
    warns_disabled: frozenset[str] = frozenset()
    stack: list[ModelState] = field(default_factory=list)

    @property
    def current(self) -> ModelState:
        return self.stack[-1] if self.stack else self.initial

    @property
    def depth(self) -> int:
        return len(self.stack)

    def entered(self, region: Region) -> tuple[ModelState, bool]:
        """The state inside ``region`` entered now, and whether entering it warns."""
        cur = self.current
        dtype = region.dtype if region.dtype is not None else cur.devices[region.device].dtype
        enabled, warns = region.enabled, False
        checked = enabled or region.device in self.warns_disabled
        if checked and region.device in self.rejecting and dtype not in accepted_dtypes(
            region.device
        ):
            enabled, warns = False, True
        cache = cur.cache_enabled if region.cache_enabled is None else region.cache_enabled
        states = dict(cur.devices)
        states[region.device] = DeviceState(enabled, dtype)
        return ModelState(states, cache, cur.nesting + 1), warns

    def enter(self, region: Region) -> bool:
        state, warns = self.entered(region)
        self.stack.append(state)
        return warns

    def exit(self) -> None:
        self.stack.pop()

    def fresh_thread(self) -> ModelState:
        """A new thread starts with autocast off, whatever regions this one has open."""
        states = {d: replace(s, enabled=False) for d, s in self.initial.devices.items()}
        return ModelState(states, self.initial.cache_enabled, 0)
