"""Mutants of the torch.compile / torch.export tier:
broken implementations its checks must catch."""

from __future__ import annotations

from amp_conformance.tools.selftest.catalogue import Mutant, patch, register  # noqa: F401
