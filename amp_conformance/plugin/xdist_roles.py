"""Which part of a run this process plays under pytest-xdist, decided in one place.

A serial run is one process that collects, runs and reports; under ``-n`` the controller
collects nothing and runs nothing but receives every report, and each worker runs items
and receives its controller's ``workerinput``, which tells it the controller's scheduler
(``--dist``; a worker's own ``dist`` option is "no").
"""

from __future__ import annotations

from typing import Any

import pytest


def worker_input(config: pytest.Config) -> dict[str, Any]:
    """What the controller gave this worker (``workerid``, ``workercount``, …); empty elsewhere."""
    return getattr(config, "workerinput", {})


def is_worker(config: pytest.Config) -> bool:
    """An xdist worker: it runs items, and its reports go to a controller."""
    return hasattr(config, "workerinput")


def is_xdist_controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no item and receives every report. Also right before
    xdist's own ``pytest_cmdline_main`` has turned ``-n N`` into ``--dist load``."""
    if is_worker(config):
        return False
    if getattr(config.option, "dist", "no") != "no":
        return True
    workers = getattr(config.option, "numprocesses", None)
    if workers in ("auto", "logical"):  # xdist runs serially under --pdb
        return not config.getoption("usepdb", False)
    return bool(workers)


#: the ``workerinput`` key under which a worker is told its controller's ``--dist``
DIST_KEY = "amp_dist"


def scheduler(config: pytest.Config) -> str:
    """The xdist scheduler (``--dist``) of the run this process belongs to: "no" serially."""
    if is_worker(config):
        return worker_input(config).get(DIST_KEY, "no")
    return getattr(config.option, "dist", "no")
