"""Collection of the OpInfo tier: a pytest plugin required by the suite module
``amp_conformance.suite.test_opinfo`` (its ``pytest_plugins``), so it is active exactly
where that module is collected.

- Opt-in: without ``--amp-opinfo`` the suite function yields no item at all (not one
  skipped item per op), so the default run's items are what they are without the tier,
  and op_db is never imported.
- One item per (amp dtype, OpInfo) in op_db's order, id ``<device>-<dtype>-<op>[-<variant>]``;
  an OpInfo the tier cannot use on the device is generated and skipped with why, so the
  report accounts for every op of op_db.

``plugin.parametrize`` imports this module before the suite module's ``pytest_plugins``
names it, too late for pytest to rewrite its asserts (it has none): PYTEST_DONT_REWRITE
says so, and pytest does not warn that it could not.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from amp_conformance.checks.opinfo import reference, source
from amp_conformance.checks.opinfo.check import CHECK, OpinfoCase

FIXTURE = "opinfo_case"


def enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("amp_opinfo", default=False))


def _checks_of(obj: Any) -> list[str]:
    if not inspect.isfunction(obj):
        return []
    marks = getattr(obj, "pytestmark", [])
    return [m.args[0] for m in marks if getattr(m, "name", None) == "amp_check" and m.args]


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Any:
    if CHECK in _checks_of(obj) and not enabled(collector.config):
        return []  # not generated: the tier was not asked for
    return None


def params(settings: Any) -> list[Any]:  # plugin.parametrize calls it with the run's settings
    """One param per (amp dtype, OpInfo), the unusable ones marked skip with why."""
    found = []
    for dtype in settings.amp_dtypes:
        for ref in source.refs():
            case = OpinfoCase(settings.target, dtype, ref, settings.numerics,
                              settings.opinfo_samples, settings.oplists)
            reason = source.unusable(ref.lookup(), settings.device)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            found.append(pytest.param(case, id=case.id, marks=marks))
    return found


def pytest_unconfigure(config: pytest.Config) -> None:
    reference.release()  # the reference kernels' registrations end with the run
