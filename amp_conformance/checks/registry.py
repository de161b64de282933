"""The check families, found: every package of :mod:`amp_conformance.checks` that declares
``CHECKS`` is a family, and its checks enter the table of :mod:`amp_conformance.core.registry`
when this module is imported (the plugin and every command import it). A family's selftest
mutants live beside its checks (``<family>/mutants.py``) and are gathered by :func:`mutants`.

Adding a family is one folder: ``checks/<family>/__init__.py`` with its ``CHECKS`` (and
``PARAMS`` for fixtures of its own, ``TIER`` for an opt-in tier), its logic beside it,
``mutants.py`` with the broken implementations its checks must catch; and its suite module
``suite/test_<family>.py``. ``python -m amp_conformance.checks.registry``
prints docs/checks.md's table of them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

from amp_conformance import checks
from amp_conformance.checks.mutation import CATALOGUE, Mutant
from amp_conformance.checks.tier import Tier
from amp_conformance.core.registry import (
    BEGIN,
    END,
    REGISTRY,
    Check,
    UnknownCheck,
    get,
    markdown,
    names,
    register,
)

__all__ = ["BEGIN", "END", "REGISTRY", "Check", "UnknownCheck", "families", "get", "markdown",
           "mutants", "names", "params", "register", "tier_of", "tiers"]

PACKAGE = checks.__name__


@functools.cache
def families() -> tuple[ModuleType, ...]:
    """Every family package, by name: a package of ``amp_conformance.checks`` with ``CHECKS``
    (read once: the parametrization asks for them per test function)."""
    found = []
    for info in sorted(pkgutil.iter_modules(checks.__path__), key=lambda i: i.name):
        if info.ispkg:
            module = importlib.import_module(f"{PACKAGE}.{info.name}")
            if hasattr(module, "CHECKS"):
                found.append(module)
    return tuple(found)


def family_name(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[1]


def _enter(module: ModuleType) -> None:
    family = family_name(module)
    for check in module.CHECKS:
        if check.name != family and not check.name.startswith(family + "_"):
            raise ValueError(f"family {family} declares check {check.name!r}: a family's "
                             f"checks are named {family!r} or {family}_<variant>")
        register(dataclasses.replace(check, family=family))


def tiers() -> tuple[Tier, ...]:
    """The opt-in tiers: each family's ``TIER`` (:mod:`amp_conformance.checks.tier`)."""
    return tuple(module.TIER for module in families() if hasattr(module, "TIER"))


def tier_of(check: str) -> Tier | None:
    return next((t for t in tiers() if t.check == check), None)


def params() -> dict[tuple[str, ...], Callable[[Any, Any], list[Any]]]:
    """How the families parametrize their own fixtures: the fixture names -> a function of
    (metafunc, settings) giving the params (each family's ``PARAMS``)."""
    found: dict[tuple[str, ...], Callable[[Any, Any], list[Any]]] = {}
    for module in families():
        found.update(getattr(module, "PARAMS", {}))
    return found


#: why a check that compares values does not apply under ``--fake``
FAKE_NEEDS_VALUES = "not applicable in --fake mode: the check needs values"


def not_applicable(check: str, case: Any) -> str | None:
    """Why the per-entry check ``check`` does not apply to ``case``, or None when it does:
    the entry's own version bounds and skips first, then the check's registered rule."""
    reason = case.skip_reason(check)
    if reason:
        return reason
    spec = get(check)
    if spec.not_applicable is not None:
        reason = spec.not_applicable(case)
        if reason:
            return reason
    if spec.needs_values and case.target.fake:
        return FAKE_NEEDS_VALUES
    return None



def mutants() -> dict[str, Mutant]:
    """Every family's mutants (its ``mutants`` module imported once), by name, each
    knowing its family."""
    for module in families():
        name = f"{module.__name__}.mutants"
        if name in _IMPORTED or importlib.util.find_spec(name) is None:
            continue
        before = set(CATALOGUE)
        importlib.import_module(name)
        _IMPORTED.add(name)
        for added in set(CATALOGUE) - before:
            CATALOGUE[added] = dataclasses.replace(CATALOGUE[added], family=family_name(module))
    return CATALOGUE


_IMPORTED: set[str] = set()


if not REGISTRY:
    for _family in families():
        _enter(_family)


if __name__ == "__main__":  # python -m amp_conformance.checks.registry: print the table
    print(markdown(), end="")
