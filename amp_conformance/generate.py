"""Parametrize the conformance checks from the op lists and the run's settings.

Ids are ``<device>-<amp dtype>-<category>-<entry id>`` for op-list checks and
``<device>-<amp dtype>`` for device-generic ones: derived from data only, so they are
the same across runs and pytest-xdist workers. A case that does not apply is still
generated, marked skip with the reason, never silently dropped.
"""

from __future__ import annotations

import functools

import pytest

from . import devices, oplist
from .harness import Case
from .options import Settings

CASE_FIXTURE = "amp_case"
DTYPE_FIXTURE = "amp_dtype"


@functools.cache
def load_oplist(device: str, extra: tuple[str, ...]) -> oplist.OpList:
    return oplist.load(device, extra)


def cases(settings: Settings) -> list[Case]:
    entries = load_oplist(settings.device, settings.oplists).entries
    return [
        Case(settings.target, dtype, entry, settings.numerics)
        for dtype in settings.amp_dtypes
        for entry in entries
    ]


def not_applicable(check: str, case: Case) -> str | None:
    """Why ``check`` does not apply to ``case``, or None when it does."""
    reason = case.skip_reason(check)
    if reason:
        return reason
    device, fake, policy = case.target.device, case.target.fake, case.entry.policy
    if check == "numerics":
        if fake:
            return "not applicable in --fake mode: fake tensors carry no values to compare"
        if policy == "banned":
            return "not applicable: a banned op has no output under autocast"
    if check == "outside" and policy == "banned":
        return "not applicable: the policy check of a banned op also runs it outside autocast"
    if check == "legacy":
        if device not in devices.LEGACY_AUTOCAST:
            return f"not applicable: {device} has no legacy torch.{device}.amp.autocast"
        if fake:
            return "not applicable in --fake mode: the legacy entry point needs the device"
        if policy == "banned":
            return "not applicable: a banned op has no output under autocast"
    return None


def _check_name(metafunc: pytest.Metafunc) -> str:
    marker = metafunc.definition.get_closest_marker("amp_check")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: an op-list check needs @pytest.mark.amp_check(name)"
        )
    return marker.args[0]


def _dtype_params(metafunc: pytest.Metafunc, settings: Settings) -> list:
    needs_values = metafunc.definition.get_closest_marker("amp_needs_values") is not None
    marks = []
    if needs_values and settings.fake:
        marks = [pytest.mark.skip(reason="not applicable in --fake mode: the check needs values")]
    return [
        pytest.param(dtype, id=f"{settings.device}-{devices.dtype_name(dtype)}", marks=marks)
        for dtype in settings.amp_dtypes
    ]


def parametrize(metafunc: pytest.Metafunc, settings: Settings) -> None:
    if CASE_FIXTURE in metafunc.fixturenames:
        check = _check_name(metafunc)
        params = []
        for case in cases(settings):
            reason = not_applicable(check, case)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(case, id=case.id, marks=marks))
        metafunc.parametrize(CASE_FIXTURE, params)
    elif DTYPE_FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(DTYPE_FIXTURE, _dtype_params(metafunc, settings))

