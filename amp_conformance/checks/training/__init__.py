"""Autocast in training, device-generic: checkpointing, threads, cache interactions with
grad modes, RNN modules, and the autocast API surface (project issue #12, part A).

Each module holds the logic of one check family; the suite modules
``amp_conformance/suite/test_{checkpoint,threads,cache_interactions,rnn_modules,api_surface}.py``
only parametrize and call it. Failures are :class:`ConformanceFailure` naming what was
checked, the device, the amp dtype, expected and actual, and the upstream issue that
motivates the check.
"""

from __future__ import annotations

from amp_conformance.core.target import Target

#: Why checks that build an autograd graph do not run under ``--fake``: the autograd
#: metadata of a tensor asks the device's guard implementation, which a build without
#: the device lacks (a CPU build aborts the whole process, it does not raise).
FAKE_AUTOGRAD = ("not applicable in --fake mode: autograd on fake {device} tensors needs the "
                 "device (the autograd engine asks for the device's guard implementation; a "
                 "build without it aborts the process)")


class NotApplicable(Exception):
    """A check that does not apply here (this machine, this torch, this device); the suite
    reports it skipped with the message as its reason, never passed."""


def fake_autograd_reason(target: Target) -> str | None:
    """The skip reason for a check that needs autograd, or None on a real device."""
    return FAKE_AUTOGRAD.format(device=target.device) if target.fake else None


def dtype_name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")
