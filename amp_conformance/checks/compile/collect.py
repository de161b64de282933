"""Collection of the compile checks: a pytest plugin required by the suite module
``amp_conformance.suite.test_compile`` (its ``pytest_plugins``), so it is active exactly
where that module is collected.

- The compiled tier is opt-in: without ``--amp-compile`` its suite function yields no item
  at all (not one skipped item per entry and amp dtype), so the default run's items are
  exactly what they would be without the tier.
- The region scenarios are parametrized by backend and scenario after the plugin's amp
  dtype (``trylast``), so their ids read ``<device>-<dtype>-<backend>-<scenario>`` like the
  per-entry ``<device>-<dtype>-<backend>-<category>-<entry>``.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from amp_conformance.checks.compile import backends, regions
from amp_conformance.checks.compile.per_entry import CHECK
from amp_conformance.core.errors import ConformanceFailure

SCENARIO_FIXTURES = ("compile_backend", "scenario")


def _backend(config: pytest.Config) -> str | None:
    """--amp-compile (validated with the run's settings, before collection)."""
    return config.getoption("amp_compile", default=None)


def _checks_of(obj: Any) -> list[str]:
    if not inspect.isfunction(obj):  # only test functions carry the amp_check marker
        return []
    marks = getattr(obj, "pytestmark", [])
    return [m.args[0] for m in marks if getattr(m, "name", None) == "amp_check" and m.args]


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Any:
    if CHECK in _checks_of(obj) and _backend(collector.config) is None:
        return []  # not generated: the tier was not asked for
    return None


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


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if all(name in metafunc.fixturenames for name in SCENARIO_FIXTURES):
        chosen = _backend(metafunc.config)
        names = backends.REGION_BACKENDS + (
            (chosen,) if chosen and chosen not in backends.REGION_BACKENDS else ())
        metafunc.parametrize(",".join(SCENARIO_FIXTURES), scenario_params(names))
