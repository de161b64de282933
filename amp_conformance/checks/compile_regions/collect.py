"""The region scenarios' items: one per (backend, scenario) after the amp dtype, so their ids
read ``<device>-<dtype>-<backend>-<scenario>`` like the compiled tier's
``<device>-<dtype>-<backend>-<category>-<entry>``; eager and aot_eager always, the
``--amp-compile`` backend too; a scenario that shows a known upstream defect is a strict
xfail naming it."""

from __future__ import annotations

from typing import Any

import pytest

from amp_conformance.checks import compiling
from amp_conformance.checks.compile_regions import export, regions
from amp_conformance.core.errors import ConformanceFailure

FIXTURES = ("compile_backend", "scenario")
EXPORT_FIXTURES = ("export_mode", "export_scenario")


def scenario_params(backend_names: tuple[str, ...]) -> list[Any]:
    """One param per (backend, scenario); a known upstream defect is a strict xfail."""
    params = []
    for backend in backend_names:
        for scenario in regions.SCENARIOS:
            known = scenario.known_defect(backend)
            marks = [pytest.mark.xfail(strict=True, raises=ConformanceFailure, reason=known)
                     ] if known else []
            params.append(pytest.param(backend, scenario, id=f"{backend}-{scenario.name}",
                                       marks=marks))
    return params


def params(metafunc: Any, settings: Any) -> list[Any]:
    chosen = settings.compile_backend
    names = compiling.REGION_BACKENDS + (
        (chosen,) if chosen and chosen not in compiling.REGION_BACKENDS else ())
    return scenario_params(names)


def export_params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (export mode, scenario): ``<device>-<mode>-<scenario>``, every
    scenario in the compiled tier (``--amp-compile``), :data:`export.DEFAULT_SCENARIOS`
    otherwise; a known upstream defect is a strict xfail naming it."""
    every = settings.compile_backend is not None
    params = []
    for mode in export.MODES:
        for scenario in regions.SCENARIOS:
            if not every and scenario.name not in export.DEFAULT_SCENARIOS:
                continue
            known = scenario.known_defect(regions.EXPORT + mode)
            marks = [pytest.mark.xfail(strict=True, raises=ConformanceFailure, reason=known)
                     ] if known else []
            params.append(pytest.param(mode, scenario, id=f"{mode}-{scenario.name}",
                                       marks=marks))
    return params
