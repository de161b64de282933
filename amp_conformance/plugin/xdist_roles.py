"""Which part of a run this process plays under pytest-xdist, decided in one place.

A serial run is one process that collects, runs and reports; under ``-n`` the controller
collects nothing and runs nothing but receives every report, and each worker runs items
and receives its controller's ``workerinput``.
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
    """An xdist controller: it runs no item and receives every report."""
    return not is_worker(config) and getattr(config.option, "dist", "no") != "no"
