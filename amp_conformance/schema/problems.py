"""Problems of op lists: each names the file, entry and field; all of a file come together.

The loader records every problem it finds (:class:`Problems`) and raises them as one
:class:`OpListError`, so a vendor fixing a list sees every mistake in one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from amp_conformance.schema import validators

#: The value of a field that did not parse (its problem is recorded).
BAD = object()


@dataclass(frozen=True)
class Problem:
    """One problem of an op list: where (file, entry or exclusion, field) and what."""

    path: str
    entry: str | None
    field: str | None
    message: str
    kind: str = "entry"

    def __str__(self) -> str:
        where = self.path
        if self.entry is not None:
            where += f": {self.kind} {self.entry!r}"
        if self.field is not None:
            where += f": field {self.field!r}"
        return f"{where}: {self.message}"


class OpListError(ValueError):
    """Malformed op lists: every problem found (``errors``), one line each naming the file,
    entry id and field; ``path``, ``entry``, ``field``, ``kind`` and ``message`` are those of
    the first, so a caller that handles one problem still can."""

    def __init__(
        self, path: Path | str, entry: str | None = None, field: str | None = None,
        message: str = "", kind: str = "entry", errors: Sequence[Problem] = (),
    ):
        self.errors: tuple[Problem, ...] = tuple(errors) or (
            Problem(str(path), entry, field, message, kind),)
        first = self.errors[0]
        self.path, self.entry, self.field = first.path, first.entry, first.field
        self.kind, self.message = first.kind, first.message
        if len(self.errors) == 1:
            text = str(first)
        else:
            files = {p.path for p in self.errors}
            where = first.path if len(files) == 1 else f"{len(files)} op-list files"
            text = f"{where}: {len(self.errors)} problems:\n" + "\n".join(
                f"  {p}" for p in self.errors)
        super().__init__(text)


class Problems:
    """Collects the problems of a file (or a merge), so one OpListError reports them all."""

    def __init__(self, path: Path | str = ""):
        self.path = str(path)
        self.items: list[Problem] = []

    def add(self, entry: str | None, field: str | None, message: str, kind: str = "entry",
            path: Path | str | None = None) -> None:
        self.items.append(Problem(str(path or self.path), entry, field, message, kind))

    def invalid(self, entry: str | None, key: str, exc: validators.Invalid, kind: str = "entry") -> None:
        for sub, message in exc.problems:
            self.add(entry, key + sub, message, kind)

    def raise_any(self) -> None:
        if self.items:
            raise OpListError(self.items[0].path, errors=self.items)
