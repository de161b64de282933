"""PyTorch's own autocast defects, tracked apart from the contract (``oplists/defects.toml``).

The op lists state the intended contract. Where PyTorch itself departs from it (a
hard-coded dtype, a policy that raises for an input mix it should promote, a missing
kernel), the entry names the defect in its ``reference_defect`` table with what PyTorch
does today. A device matching either passes; the report lists, per device, which defects
it reproduces and which it fixes. ``fixed`` bounds a defect: on a torch at or after the
release that fixed it, only the intended behaviour passes.

Checks that are not op-list entries (the cast-cache checks) name a defect by id and ask
:func:`applies` whether it is still in the running torch.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from typing import Any

from amp_conformance.schema import validators as v
from amp_conformance.schema.location import builtin_dir
from amp_conformance.schema.problems import OpListError
from amp_conformance.schema.versions import release

#: how the reason of an expected failure the suite records itself begins: PyTorch's own
#: defect, or a gap of torch's API surface (never a user's declaration)
KNOWN_DEFECT = "known PyTorch defect "
KNOWN_GAP = "known torch gap: "


def is_recorded(reason: str | None) -> bool:
    """Whether an expected failure is one the suite records (PyTorch's own), not one a
    user declared in an xfail file."""
    return bool(reason) and reason.startswith((KNOWN_DEFECT, KNOWN_GAP))


DEFECTS_FILE = "defects.toml"
_KEYS = ("id", "links", "summary", "fixed")


@dataclass(frozen=True)
class Defect:
    """One upstream defect: where it is reported and what is wrong."""

    id: str
    #: the upstream issue(s) or, where none is filed, the source line that causes it
    links: tuple[str, ...]
    summary: str
    #: the first torch release without the defect (None: still there)
    fixed: str | None = None

    def applies(self, version: str | None = None) -> bool:
        """Whether the running torch (or ``version``) still has the defect."""
        return self.fixed is None or release(version) < self.fixed

    def cite(self) -> str:
        return f"{self.id} ({', '.join(self.links)})"


@dataclass(frozen=True)
class DefectUse:
    """An entry's ``reference_defect``: which defect, and what PyTorch does today."""

    id: str
    #: the output dtype(s) PyTorch gives today, in the words of the entry's ``expect``
    expect: str | tuple[str, ...]
    #: with ``expect = "error"``: the start of the message PyTorch raises today
    error: str | None = None
    #: what the numerics control casts to when a device reproduces the defect
    cast: str = "none"
    #: whether PyTorch today enters the device's Autocast kernel at all
    kernel: bool = True

    @property
    def defect(self) -> Defect:
        return registry()[self.id]


@functools.cache
def registry() -> dict[str, Defect]:
    """Every recorded defect by id (raises OpListError naming the file, id and field)."""
    path = builtin_dir() / DEFECTS_FILE
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found: dict[str, Defect] = {}
    for i, raw in enumerate(data.get("defect", [])):
        did = raw.get("id", f"#{i}")
        for key in sorted(set(raw) - set(_KEYS)):
            raise OpListError(path, did, key, f"unknown field; allowed: {', '.join(_KEYS)}",
                              kind="defect")
        links = raw.get("links")
        if not isinstance(links, list) or not links or not all(
                isinstance(x, str) and x.startswith("https://") for x in links):
            raise OpListError(path, did, "links", "expected a non-empty array of https:// "
                              "addresses (the upstream issues, or the source line)", kind="defect")
        if not isinstance(raw.get("summary"), str) or not raw["summary"].strip():
            raise OpListError(path, did, "summary", "expected what is wrong, as text", kind="defect")
        try:
            fixed = None if "fixed" not in raw else v.version(raw["fixed"])
            v.identifier(did)
        except v.Invalid as exc:
            raise OpListError(path, did, "fixed" if "fixed" in raw else "id", str(exc),
                              kind="defect") from None
        found[did] = Defect(did, tuple(links), raw["summary"], fixed)
    return found


def applies(defect_id: str, version: str | None = None) -> bool:
    """Whether the running torch still has the defect ``defect_id`` (checks use this)."""
    return registry()[defect_id].applies(version)


_USE_KEYS = ("id", "expect", "error", "cast", "kernel")


def parse_use(value: Any) -> DefectUse:
    """An entry's ``reference_defect`` table (raises Invalid naming each sub-field)."""
    if not isinstance(value, dict):
        raise v.invalid('expected a table {id = "...", expect = "...", cast = "..."}')
    problems = [(f".{k}", f"unknown key; allowed: {', '.join(_USE_KEYS)}")
                for k in sorted(set(value) - set(_USE_KEYS))]
    did = value.get("id")
    if did not in registry():
        problems.append((".id", f"unknown defect {did!r}; recorded in oplists/{DEFECTS_FILE}: "
                                f"{', '.join(sorted(registry()))}"))
    try:
        expect = v.dtypes(v.EXPECT_WORDS)(value.get("expect"))
    except v.Invalid as exc:
        problems.extend((f".expect{sub}", m) for sub, m in exc.problems)
        expect = None
    error = value.get("error")
    if expect == "error" and not (isinstance(error, str) and error.strip()):
        problems.append((".error", 'expect = "error" needs the start of the message PyTorch '
                                   "raises today"))
    cast = value.get("cast", "none")
    if cast not in v.CASTS:
        problems.append((".cast", f"unknown value {cast!r}; allowed: {', '.join(v.CASTS)}"))
    kernel = value.get("kernel", True)
    if not isinstance(kernel, bool):
        problems.append((".kernel", f"expected true or false, got {kernel!r}"))
    if problems:
        raise v.Invalid(*problems)
    return DefectUse(did, expect, error, cast, kernel)
