"""Parametrize the conformance checks from the op lists, the check registry and the settings.

Ids are ``<device>-<amp dtype>-<category>-<entry id>`` for per-entry checks and
``<device>-<amp dtype>`` for device-generic ones: derived from data only, so they are
the same across runs and pytest-xdist workers. A case that does not apply is still
generated, marked skip with the reason, never silently dropped.
"""

from __future__ import annotations

import pytest

from amp_conformance.checks import registry
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.compile import per_entry as compiled
from amp_conformance.checks.opinfo import collect as opinfo
from amp_conformance.core import devices
from amp_conformance.plugin.options import Settings

CASE_FIXTURE = "amp_case"
DTYPE_FIXTURE = "amp_dtype"
#: for device-generic checks that do not depend on the autocast dtype: one item per run,
#: its id the device type
DEVICE_FIXTURE = "amp_device"
_FAKE_NEEDS_VALUES = "not applicable in --fake mode: the check needs values"


def cases(settings: Settings) -> list[Case]:
    entries = load_oplist(settings.device, settings.oplists).entries
    return [
        Case(settings.target, dtype, entry, settings.numerics)
        for dtype in settings.amp_dtypes
        for entry in entries
    ]


def not_applicable(check: str, case: Case) -> str | None:
    """Why the per-entry check ``check`` does not apply to ``case``, or None when it does:
    the entry's own version bounds and skips first, then the check's registered rule."""
    reason = case.skip_reason(check)
    if reason:
        return reason
    spec = registry.get(check)
    if spec.not_applicable is not None:
        reason = spec.not_applicable(case)
        if reason:
            return reason
    if spec.needs_values and case.target.fake:
        return _FAKE_NEEDS_VALUES
    return None


def column_absent(check: str, settings: Settings) -> str | None:
    """Why a whole per-entry column does not exist for this run, or None: the legacy check
    on a device without a legacy entry point, or where the device is faked."""
    if check != "legacy":
        return None
    if devices.legacy_autocast(settings.device) is None:
        return (f"not applicable: {settings.device} has no legacy torch.{settings.device}.amp."
                "autocast, so the legacy column is not generated")
    if settings.fake:
        return ("not applicable in --fake mode: the legacy entry point needs the device, so the "
                "legacy column is not generated")
    return None


def check_of(metafunc: pytest.Metafunc) -> registry.Check:
    """The registered check a suite function declares with @pytest.mark.amp_check(name)."""
    marker = metafunc.definition.get_closest_marker("amp_check")
    if marker is None or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: a conformance check needs @pytest.mark.amp_check(name)"
        )
    try:
        return registry.get(marker.args[0])
    except registry.UnknownCheck as exc:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {exc}") from None


def _dtype_params(metafunc: pytest.Metafunc, settings: Settings, check: registry.Check) -> list:
    needs_values = (check.needs_values
                    or metafunc.definition.get_closest_marker("amp_needs_values") is not None)
    marks = []
    if needs_values and settings.fake:
        marks = [pytest.mark.skip(reason=_FAKE_NEEDS_VALUES)]
    return [
        pytest.param(dtype, id=f"{settings.device}-{devices.dtype_name(dtype)}", marks=marks)
        for dtype in settings.amp_dtypes
    ]


def _device_params(metafunc: pytest.Metafunc, settings: Settings, check: registry.Check) -> list:
    needs_values = (check.needs_values
                    or metafunc.definition.get_closest_marker("amp_needs_values") is not None)
    marks = [pytest.mark.skip(reason=_FAKE_NEEDS_VALUES)] if needs_values and settings.fake else []
    return [pytest.param(settings.device, id=settings.device, marks=marks)]


def parametrize(metafunc: pytest.Metafunc, settings: Settings) -> None:
    if CASE_FIXTURE in metafunc.fixturenames:
        check = check_of(metafunc)
        absent = column_absent(check.name, settings)
        if absent:  # one line says why, instead of one skip per entry
            metafunc.parametrize(CASE_FIXTURE, [pytest.param(
                None, id=f"{settings.device}-{check.name}-absent", marks=pytest.mark.skip(reason=absent))])
            return
        params = []
        for case in cases(settings):
            if check.name == compiled.CHECK:  # opt-in tier: the backend in the case and its id
                case = compiled.CompiledCase.of(case, settings.compile_backend)
            reason = not_applicable(check.name, case)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(case, id=case.id, marks=marks))
        metafunc.parametrize(CASE_FIXTURE, params)
    elif opinfo.FIXTURE in metafunc.fixturenames:  # the opt-in OpInfo tier
        metafunc.parametrize(opinfo.FIXTURE, opinfo.params(settings))
    elif DTYPE_FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(DTYPE_FIXTURE, _dtype_params(metafunc, settings, check_of(metafunc)))
    elif DEVICE_FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(DEVICE_FIXTURE, _device_params(metafunc, settings, check_of(metafunc)))
