"""Backends the project's tests run the suite against, each a module imported by
``--backend-module`` with this folder on ``PYTHONPATH`` (:func:`run`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import children

HERE = Path(__file__).parent


def run(*args: str, cwd: Path | str | None = None, timeout: float = 600,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python *args`` in a child that can import these backends (and nothing else set
    by ``PYTEST_ADDOPTS``), with ``env`` added to its environment."""
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(
        filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    env.pop("PYTEST_ADDOPTS", None)
    return children.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
