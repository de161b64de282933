"""Compatibility name of the selftest's mutant plugin (``-p amp_conformance.mutant_plugin``).

The plugin lives in :mod:`amp_conformance.tools.selftest.plugin`; docs/selftest.md and
older campaign scripts name this module, so its hooks are re-exported here.
"""

from amp_conformance.tools.selftest.plugin import pytest_configure, pytest_unconfigure

__all__ = ["pytest_configure", "pytest_unconfigure"]
