"""Root conftest of the amp-conformance checkout.

The plugin itself is registered through the ``pytest11`` entry point of the installed
package (``pip install -e .``); here we enable pytester, which the project's own tests in
``tests/`` use to run the suite against broken autocast implementations, and schedule the
checkout's own run under pytest-xdist.

``pytest -n 2`` here (no ``--dist`` named) hands its work out one unit at a time, in
collection order, the tests marked ``slow`` first: xdist's ``load`` gave each worker a run
of consecutive items to start with, so a test that runs the suite in child processes for a
minute, met near the end, kept one worker busy long after the other had finished. A unit
is a project test alone, a test class whole (its tests read one set-up, made once), or the
items of one test function of the suite (they share its warm-up in the worker that runs
them).
"""

from __future__ import annotations

import os

import pytest
from xdist.scheduler import LoadScopeScheduling

pytest_plugins = ("pytester",)

#: the ``workerinput`` key that tells a worker its controller hands out the slow tests first
SLOW_FIRST = "amp_tests_slow_first"


def unit_of(nodeid: str) -> str:
    """The unit of work an item belongs to (the module docstring says which)."""
    function = nodeid.partition("[")[0]
    parts = function.split("::")
    if len(parts) > 2:
        return "::".join(parts[:2])
    return nodeid if function.startswith("tests/") else function


class SlowFirst(LoadScopeScheduling):
    """xdist's scope scheduler over :func:`unit_of`'s units, in collection order."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)


def _ours(config: pytest.Config) -> bool:
    """An xdist run whose scheduler nobody named: ``-n N`` made it ``load``."""
    if getattr(config.option, "dist", "no") != "load":
        return False
    args = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split(),
            *config.getini("addopts")]
    return not any(a in ("--dist", "-d", "--distload") or a.startswith("--dist=") for a in args)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> SlowFirst | None:  # noqa: ANN001
    if not _ours(config):
        return None
    config.option.loadscopereorder = False  # the units in collection order
    return SlowFirst(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # noqa: ANN001 - xdist's WorkerController
    node.workerinput[SLOW_FIRST] = _ours(node.config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: runs the suite or a tool in child processes for "
                            "seconds; the checkout's xdist run starts it before the others")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the workers of such a run, the slow tests first (every worker collects the same
    order, which xdist requires); serially, file order."""
    if getattr(config, "workerinput", {}).get(SLOW_FIRST):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)
