"""The plugin's one gate for the opt-in tiers (:mod:`amp_conformance.checks.tier`): a suite
function of a tier the run did not ask for yields no item at all (not one skipped item per
case), so a default run's items are exactly what they are without the tier; a tier's
registrations end with the run."""

from __future__ import annotations

from typing import Any

import pytest

from amp_conformance.checks import registry
from amp_conformance.plugin.items import checks_of
from amp_conformance.plugin.session_settings import settings


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: Any) -> Any:
    for check in checks_of(obj, getattr(collector, "obj", None)):
        tier = registry.tier_of(check)
        if tier is not None and not tier.collects(settings(collector.config), name):
            return []  # not generated: the tier was not asked for (or claims no such item)
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    for tier in registry.tiers():
        tier.release()
