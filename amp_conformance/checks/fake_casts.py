"""Under --fake, a call that fails below autocast, after the cast: check the casts instead.

A torch build without a device still has that device's autocast kernels, so fake tensors
of it reach ``Autocast<Device>``, which casts the inputs, and then a layer below that the
build lacks for the device: scaled_dot_product_attention picks its backend through
``_fused_sdp_choice_stub``, which a CPU build has no MPS or XPU implementation of (an
INTERNAL ASSERT), and ops without a fake kernel fall back to the real device. What the
policy check asks, the dtype autocast gave the inputs, is settled before that point: a
TorchDispatchMode above FakeTensorMode sees every ``aten::_to_copy`` autocast makes. So
for the errors listed in :data:`FAKE_TIER_LIMITS` (and only those: any other error still
fails the check) the policy check passes when every eligible input was cast to the
policy's dtype, and fails when one was not (an ``Autocast<Device>`` without the op's
kernel casts nothing: pytorch#141774, sdpa missing from AutocastMPS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.checks.case import Case
from amp_conformance.checks.expectations import control_dtype
from amp_conformance.core.casting import is_eligible, settle
from amp_conformance.core.errors import first_line

#: text of an error (anywhere in its message) -> why it is a limit of the fake tier,
#: raised below autocast after its casts, and not a question of the autocast policy
FAKE_TIER_LIMITS: dict[str, str] = {
    "An unexpected device type was provided": "sdpa picks its backend through "
        "_fused_sdp_choice_stub, which this build has no implementation of for the device",
    "Torch not compiled with": "an op without a fake kernel falls back to the real device, "
        "which this build lacks",
    "PyTorch is not linked with support for": "a fake decomposition touches a real tensor "
        "of the device, which this build cannot make",
    "with arguments from the 'MPS' backend": "an op without a fake kernel falls back to the "
        "real MPS device, which this build lacks",
    # CUDA builds on a machine without a GPU (older torch has fewer fake kernels)
    "Found no NVIDIA driver on your system": "an op without a fake kernel in this torch falls "
        "back to the real CUDA device, which this machine lacks",
    "CUDA driver version is insufficient for CUDA runtime version": "the call asks the CUDA "
        "driver (sdpa choosing its backend), which this machine lacks",
    "without MPS backend": "torch.autocast asks the MPS backend whether the OS supports "
        "bfloat16, which this build lacks",
    "from fake tensor input": "AOTAutograd of this torch cannot compile a call whose inputs "
        "are fake tensors of another FakeTensorMode (the fake tier's own)",
}


class FakeTierLimit(Exception):
    """Under --fake, the call hit a limit of the fake tier (:data:`FAKE_TIER_LIMITS`) where
    no cast shows the answer: the check does not apply to this op here (a skip, with why)."""


def not_applicable(exc: BaseException) -> FakeTierLimit | None:
    """The skip for ``exc`` raised under --fake, or None when it is no fake-tier limit."""
    why = limit_of(exc)
    if why is None:
        return None
    return FakeTierLimit(f"not applicable in --fake mode on torch {torch.__version__}: {why} "
                         f"({type(exc).__name__}: {first_line(exc)})")


class CastRecorder(TorchDispatchMode):
    """Records the dtype conversions (``aten._to_copy`` to another dtype) of given tensors,
    by identity: what autocast did to each input before the call went on."""

    def __init__(self, inputs: list[tuple[str, torch.Tensor]]):
        super().__init__()
        self.labels = {id(t): label for label, t in inputs}
        self.casts: dict[str, list[torch.dtype]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and args and id(args[0]) in self.labels:
            dtype = kwargs.get("dtype")
            if dtype is not None and dtype != args[0].dtype:
                self.casts.setdefault(self.labels[id(args[0])], []).append(dtype)
        return func(*args, **kwargs)


class FailedAfterCast(Exception):
    """The call raised a limit of the fake tier after autocast cast its inputs as the
    policy says: ``observed`` is what to record for the variant."""

    def __init__(self, observed: str):
        super().__init__(observed)
        self.observed = observed


class NotCast(Exception):
    """Under --fake, the call raised a limit of the fake tier before (or without) casting
    its inputs as the policy says: ``problems`` name each input."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def limit_of(exc: BaseException) -> str | None:
    """Why ``exc`` is a limit of the fake tier, or None for any other error."""
    text = str(exc)
    return next((why for pattern, why in FAKE_TIER_LIMITS.items() if pattern in text), None)


def labelled_tensors(value: Any, label: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside ``value`` (lists, tuples, dicts) with its place in the call."""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from labelled_tensors(v, f"{label}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from labelled_tensors(v, f"{label}[{k!r}]")
    elif isinstance(value, torch.Tensor):
        yield label, value


def call(case: Case, name: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` inside the region. Under --fake, a listed limit of the fake
    tier becomes :class:`FailedAfterCast` when every eligible input was cast to the policy's
    dtype before it, :class:`NotCast` (naming each input) when one was not; any other error
    propagates as it is."""
    if not case.target.fake:
        return settle(fn(*args, **kwargs))
    inputs = [*labelled_tensors(args, "args"), *labelled_tensors(kwargs, "kwargs")]
    recorder = CastRecorder(inputs)
    try:
        with recorder:
            return fn(*args, **kwargs)
    except Exception as exc:
        why = limit_of(exc)
        target = control_dtype(case, args, kwargs)
        if why is None:
            raise
        if target is None:  # no cast would show the policy (an explicit dtype decides it)
            raise not_applicable(exc) from exc
        problems = _cast_problems(name, inputs, recorder, target, case.target.device)
        error = f"{type(exc).__name__}: {first_line(exc)}"
        if problems:
            raise NotCast(problems + [f"then {name} raised {error} ({why})"]) from exc
        cast = ", ".join(sorted(recorder.casts)) or "nothing to cast"
        raise FailedAfterCast(f"cast {cast} to {target}, then raised (a limit of the fake tier: "
                              f"{why}): {error}") from exc


def _cast_problems(name: str, inputs: list[tuple[str, torch.Tensor]], recorder: CastRecorder,
                   target: torch.dtype, device: str) -> list[str]:
    """Every eligible input not already in ``target`` must have been cast to it."""
    problems = []
    need = [(label, t) for label, t in inputs if is_eligible(t, device) and t.dtype != target]
    for label, t in need:
        seen = recorder.casts.get(label, [])
        if target not in seen:
            shown = ", ".join(str(d) for d in seen) or "never cast"
            problems.append(f"{name} inside autocast: {label} ({t.dtype}) was not cast to "
                            f"{target} before the call raised ({shown})")
    if not need:
        problems.append(f"{name} inside autocast: no input needed a cast to {target}, so the "
                        "casts cannot show the policy before the call raised")
    return problems
