"""The table of checks: every check the suite knows, as its family declares it.

A check's name is what its suite functions' ``@pytest.mark.amp_check(name)`` says, what an
op-list ``skip`` may name with ``check = "..."``, a column of the report and what a
vendor's capabilities can switch off. Parametrization, skip validation, capabilities and
the report read this table.

The checks are declared by their families, the packages of :mod:`amp_conformance.checks`
(each a ``CHECKS`` tuple next to its logic), which
:mod:`amp_conformance.checks.registry` finds and enters here; the plugin and every
command import it before anything asks for a name. The table lives in ``core``, below
the schema, which validates op-list skip keys against the names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One check, as its family declares it.

    - ``name``: the ``amp_check`` marker of its suite functions; op-list ``skip.check``;
      report column and ``check`` field (``plugin.report``). Its family's name, or that
      name and a suffix (``gradscaler_fused``).
    - ``doc``: one line for docs/checks.md's table.
    - ``per_entry``: parametrized over op-list entries (``amp_case``: one item per device,
      amp dtype and entry) rather than per amp dtype (``amp_dtype``); the report's op
      matrix shows per-entry checks as columns.
    - ``needs_values``: compares values, so it does not apply to fake tensors; its items are
      generated and skipped with that reason under ``--fake``.
    - ``capability``: a vendor capability it needs (``--capabilities``); a device that
      declares it absent gets every item of the check skipped with the declared reason.
    - ``not_applicable``: for per-entry checks, why the check does not apply to a case
      (``Case`` -> reason or None), beyond the entry's own skips and version bounds.
    - ``opt_in``: the option that turns an opt-in tier on (its items exist only then); a
      tier whose every item skips fails the run (``plugin.outcomes``).
    - ``entry_skips``: not per-entry, but its items call each entry of the lists
      (``transforms``): an entry's ``skip`` may name it, and it honours the skip.
    - ``family``: the package that declares it (filled in when it is found).
    """

    name: str
    doc: str
    per_entry: bool = False
    needs_values: bool = False
    capability: str | None = None
    not_applicable: Callable[[Any], str | None] | None = None
    opt_in: str | None = None
    entry_skips: bool = False
    family: str = ""


REGISTRY: dict[str, Check] = {}


class UnknownCheck(KeyError):
    """A check name that no family declares."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(check: Check) -> Check:
    if check.name in REGISTRY:
        raise ValueError(f"check {check.name!r} declared twice (families "
                         f"{REGISTRY[check.name].family} and {check.family})")
    REGISTRY[check.name] = check
    return check


def _known() -> dict[str, Check]:
    if not REGISTRY:
        raise RuntimeError("no check family is known yet: import amp_conformance.checks.registry "
                           "first (the plugin and every command do)")
    return REGISTRY


def get(name: str) -> Check:
    try:
        return _known()[name]
    except KeyError:
        raise UnknownCheck(f"unknown check {name!r}; known: {', '.join(REGISTRY)}") from None


def names(per_entry: bool | None = None) -> tuple[str, ...]:
    """The known check names, by family (only per-entry ones, or only others)."""
    return tuple(c.name for c in _known().values()
                 if per_entry is None or c.per_entry == per_entry)


def skippable() -> tuple[str, ...]:
    """The checks an op-list entry's ``skip`` may name: the per-entry ones, and those whose
    items call each entry (``entry_skips``)."""
    return tuple(c.name for c in _known().values() if c.per_entry or c.entry_skips)


#: docs/checks.md's markers (the table is printed by ``python -m amp_conformance.checks.registry``)
BEGIN = "<!-- checks: generated from amp_conformance/checks/registry.py -->"
END = "<!-- end of generated checks -->"


def markdown() -> str:
    """The table of known checks, as docs/checks.md shows it (checked by tests)."""
    rows = ["| check | family | items | needs values | capability | what it checks |",
            "| --- | --- | --- | --- | --- | --- |"]
    for c in _known().values():
        items = "per op-list entry" if c.per_entry else "per device / amp dtype"
        rows.append(f"| `{c.name}` | `{c.family}` | {items} | "
                    f"{'yes' if c.needs_values else 'no'} | {c.capability or '—'} | {c.doc} |")
    return "\n".join(rows) + "\n"
