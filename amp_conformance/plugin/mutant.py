"""The selftest's mutant for one run: ``-p amp_conformance.plugin.mutant`` with the mutant's
name in ``AMP_CONFORMANCE_MUTANT`` (``python -m amp_conformance selftest`` starts each run
so)."""

from __future__ import annotations

import os

import pytest

from amp_conformance.checks.registry import mutants

_UNDO = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    name = os.environ.get("AMP_CONFORMANCE_MUTANT")
    if not name:
        raise pytest.UsageError("amp_conformance.plugin.mutant needs AMP_CONFORMANCE_MUTANT")
    catalogue = mutants()
    if name not in catalogue:
        raise pytest.UsageError(f"unknown mutant {name!r}; known: {', '.join(sorted(catalogue))}")
    config.stash[_UNDO] = catalogue[name].apply()


def pytest_unconfigure(config: pytest.Config) -> None:
    undo = config.stash.get(_UNDO, None)
    if undo is not None:
        undo()
