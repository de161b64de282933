"""Parametrize the conformance checks from the op lists, the check families and the settings.

Ids are ``<device>-<amp dtype>-<category>-<entry id>`` for per-entry checks and
``<device>-<amp dtype>`` for device-generic ones, then the family's own fixtures
(``PARAMS``: a scenario, a policy and op, an OpInfo): derived from data only, so they are
the same across runs and pytest-xdist workers. A case that does not apply is still
generated, marked skip with the reason, never silently dropped.
"""

from __future__ import annotations

import pytest

from amp_conformance.checks import registry
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.registry import not_applicable
from amp_conformance.core import devices
from amp_conformance.plugin import items
from amp_conformance.plugin.options import Settings

CASE_FIXTURE = "amp_case"
DTYPE_FIXTURE = "amp_dtype"
#: for device-generic checks that do not depend on the autocast dtype: one item per run,
#: its id the device type
DEVICE_FIXTURE = "amp_device"


def cases(settings: Settings) -> list[Case]:
    entries = load_oplist(settings.device, settings.oplists).entries
    return [
        Case(settings.target, dtype, entry, settings.numerics)
        for dtype in settings.amp_dtypes
        for entry in entries
    ]


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
    """The check a suite function declares with @pytest.mark.amp_check(name)."""
    name = items.check_of(metafunc.definition)
    if name is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: a conformance check needs @pytest.mark.amp_check(name)"
        )
    try:
        return registry.get(name)
    except registry.UnknownCheck as exc:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {exc}") from None


def _dtype_params(metafunc: pytest.Metafunc, settings: Settings, check: registry.Check) -> list:
    needs_values = (check.needs_values
                    or metafunc.definition.get_closest_marker("amp_needs_values") is not None)
    marks = []
    if needs_values and settings.fake:
        marks = [pytest.mark.skip(reason=registry.FAKE_NEEDS_VALUES)]
    return [
        pytest.param(dtype, id=f"{settings.device}-{devices.dtype_name(dtype)}", marks=marks)
        for dtype in settings.amp_dtypes
    ]


def _device_params(metafunc: pytest.Metafunc, settings: Settings, check: registry.Check) -> list:
    needs_values = (check.needs_values
                    or metafunc.definition.get_closest_marker("amp_needs_values") is not None)
    marks = [pytest.mark.skip(reason=registry.FAKE_NEEDS_VALUES)] if needs_values and settings.fake else []
    return [pytest.param(settings.device, id=settings.device, marks=marks)]


def parametrize(metafunc: pytest.Metafunc, settings: Settings) -> None:
    if CASE_FIXTURE in metafunc.fixturenames:
        check = check_of(metafunc)
        absent = column_absent(check.name, settings)
        if absent:  # one line says why, instead of one skip per entry
            metafunc.parametrize(CASE_FIXTURE, [pytest.param(
                None, id=f"{settings.device}-{check.name}-absent", marks=pytest.mark.skip(reason=absent))])
            return
        tier = registry.tier_of(check.name)
        params = []
        for case in cases(settings):
            if tier is not None:  # a per-entry tier's case says the tier's setting
                case = tier.case(case, settings)
            reason = not_applicable(check.name, case)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(case, id=case.id, marks=marks))
        metafunc.parametrize(CASE_FIXTURE, params)
    elif DTYPE_FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(DTYPE_FIXTURE, _dtype_params(metafunc, settings, check_of(metafunc)))
    elif DEVICE_FIXTURE in metafunc.fixturenames:
        metafunc.parametrize(DEVICE_FIXTURE, _device_params(metafunc, settings, check_of(metafunc)))
    for fixtures, make in registry.params().items():  # the families' own, after the above
        if all(name in metafunc.fixturenames for name in fixtures):
            metafunc.parametrize(",".join(fixtures), make(metafunc, settings))
