"""Mutants of the training tier (backward, checkpointing, threads, RNN modules, API surface):
broken implementations its checks must catch."""

from __future__ import annotations

from amp_conformance.tools.selftest.catalogue import Mutant, patch, register  # noqa: F401
