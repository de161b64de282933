"""One resolver of what a run checks: the backend modules, the device, fake or real, the
autocast dtypes. The pytest plugin, ``discover`` and ``coverage`` all call it, so they accept
and refuse the same things with the same words (the plugin makes the error a usage error,
exit 4; the subcommands print it and exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from amp_conformance.core import devices
from amp_conformance.core.backend import BackendError, import_backend
from amp_conformance.core.target import Target, fake_supported


class SettingsError(ValueError):
    """An option that cannot be honoured; the message says what is allowed."""


@dataclass(frozen=True)
class Resolved:
    device: str
    fake: bool
    amp_dtypes: tuple[torch.dtype, ...]
    #: every autocast dtype the device supports (``amp_dtypes`` is the requested part)
    supported: tuple[torch.dtype, ...]

    @property
    def target(self) -> Target:
        return Target(self.device, self.fake)


def resolve(device: str, fake: bool | None, amp_dtypes: Sequence[str] = (),
            backend_modules: Sequence[str] = ()) -> Resolved:
    """Import the backends, validate the device and dtypes. ``fake=None`` means: fake where
    the device is absent (what ``coverage`` does, since it needs no values)."""
    for module in backend_modules:
        try:
            import_backend(module)
        except BackendError as exc:  # ImportError, any other exception, sys.exit
            raise SettingsError(str(exc)) from None
    try:
        devices.validate(device)
    except devices.DeviceError as exc:
        raise SettingsError(f"--device {device}: {exc}") from None
    here = devices.availability(device)
    if fake is None:
        fake = not here.present
    if fake and not fake_supported(device):
        raise SettingsError(
            f"--fake needs Autocast kernels for {device!r} registered in the running torch "
            f"({devices.dispatch_key(device)} has none); use it for a device other than cpu "
            "whose policy torch registers, e.g. cuda, xpu, mps")
    if not fake and not here.present:
        raise SettingsError(
            f"device {device!r} is not available here ({here.how}), so nothing can be checked "
            "on it. Run where the device is present, or add --fake to check its autocast "
            "policy without the hardware.")
    supported = tuple(devices.supported_amp_dtypes(device, fake))
    if not amp_dtypes:
        return Resolved(device, fake, supported, supported)
    try:
        dtypes = tuple(dict.fromkeys(devices.parse_dtype(n) for n in amp_dtypes))
    except devices.DeviceError as exc:
        raise SettingsError(str(exc)) from None
    refused = [d for d in dtypes if d not in supported]
    if refused:
        raise SettingsError(f"{device} autocast does not support {', '.join(map(str, refused))}; "
                            f"it supports {', '.join(map(str, supported))}")
    return Resolved(device, fake, dtypes, supported)
