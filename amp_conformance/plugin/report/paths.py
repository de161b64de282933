"""Where ``--conformance-report PATH.json`` writes, checked before the run starts.

The report is written after the last test; a path that cannot be written (a read-only
directory, ``/proc``, a file where a directory should be) would only be found then, with
a traceback that buries the run's summary. :func:`validate_report_path` finds it first.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from amp_conformance.plugin.report.files import report_paths
from amp_conformance.plugin.report.journal import journal_path


def _fail(path: Path, problem: str) -> pytest.UsageError:
    return pytest.UsageError(f"amp-conformance: --conformance-report {path}: {problem}")


def _missing_ancestors(directory: Path) -> list[Path]:
    """The directories of ``directory``'s chain that do not exist yet, outermost first."""
    missing = []
    for candidate in [directory, *directory.parents]:
        if candidate.exists():
            break
        missing.append(candidate)
    return missing[::-1]


def _probe(directory: Path) -> None:
    """Create ``directory`` if needed, write and remove a file there, and remove what was
    created: the check leaves nothing behind (the report writer creates it again)."""
    created = _missing_ancestors(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".amp-conformance-probe-", dir=directory)
        os.close(fd)
        os.unlink(name)
    finally:
        for made in reversed(created):
            try:
                made.rmdir()
            except OSError:
                break


def validate_report_path(path: Path) -> None:
    """Raise pytest.UsageError naming ``path`` unless the report (``PATH.json``, the
    ``.html`` and ``.md`` files and the journal beside it) can be written there."""
    path = Path(path)
    if path.suffix != ".json":
        raise _fail(path, "expected a path ending in .json (the HTML and Markdown files are "
                          "written beside it)")
    for target in (*report_paths(path), journal_path(path)):
        name = "it" if target == path else str(target)
        if target.is_dir():
            raise _fail(path, f"{name} is a directory")
        if target.exists() and not os.access(target, os.W_OK):
            raise _fail(path, f"{name} exists and is not writable")
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise _fail(path, f"{parent} is not a directory")
            break
    try:
        _probe(path.parent)
    except OSError as exc:
        raise _fail(path, f"cannot write a file in {path.parent}: {exc.strerror or exc}") from None
