"""Pytest plugin applying the mutant named by ``AMP_CONFORMANCE_MUTANT`` for one run."""

from __future__ import annotations

import os

import pytest

from amp_conformance.tools.selftest.catalogue import CATALOGUE

_UNDO = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    name = os.environ.get("AMP_CONFORMANCE_MUTANT")
    if not name:
        raise pytest.UsageError("amp_conformance.tools.selftest.plugin needs AMP_CONFORMANCE_MUTANT")
    if name not in CATALOGUE:
        raise pytest.UsageError(
            f"unknown mutant {name!r}; known: {', '.join(sorted(CATALOGUE))}"
        )
    config.stash[_UNDO] = CATALOGUE[name].apply()


def pytest_unconfigure(config: pytest.Config) -> None:
    undo = config.stash.get(_UNDO, None)
    if undo is not None:
        undo()
