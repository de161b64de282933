"""The registry of checks, as the suite reads it: :mod:`amp_conformance.core.registry`
(its home, below the schema) re-exported, with the not-applicable rules that live in checks
modules attached. Import the registry from here wherever those rules matter (parametrization);
the schema imports ``core.registry`` for the names alone.

A new check's row (``register(Check(...))``) goes in ``core/registry.py``, so that the schema
knows its name; a row registered here works too, but only once this module is imported.
"""

from __future__ import annotations

from amp_conformance.checks.backward import not_applicable as _backward
from amp_conformance.checks.compile.per_entry import not_applicable as _compiled_policy
from amp_conformance.core.registry import (
    BEGIN,
    END,
    REGISTRY,
    Check,
    UnknownCheck,
    attach,
    get,
    markdown,
    names,
    register,
)

__all__ = ["BEGIN", "END", "REGISTRY", "Check", "UnknownCheck", "attach", "get", "markdown",
           "names", "register"]

attach("compiled_policy", _compiled_policy)
attach("backward", _backward)

if __name__ == "__main__":  # python -m amp_conformance.checks.registry: print the table
    print(markdown(), end="")
