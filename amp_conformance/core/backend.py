"""Importing a backend module (``--backend-module``): whatever it raises becomes one line.

A backend's import may fail in any way (no driver: ``RuntimeError``; a launcher script that
calls ``sys.exit``); the pytest plugin and the subcommands all report it the same way,
naming the module and what it raised, instead of a traceback or a silent exit status.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from amp_conformance.core.errors import describe_error, first_line


class BackendError(ValueError):
    """A ``--backend-module`` that could not be imported; the message names it."""


def import_backend(module: str) -> None:
    """Import ``module``; raise BackendError naming it and what its import raised."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise BackendError(f"--backend-module {module}: cannot import it: {first_line(exc)}") from None
    except SystemExit as exc:  # a module that exits must not end the run without a word
        raise BackendError(f"--backend-module {module}: importing it called "
                           f"sys.exit({exc.code!r})") from None
    except Exception as exc:  # noqa: BLE001 - any failure of a backend import is reported
        raise BackendError(f"--backend-module {module}: importing it raised "
                           f"{describe_error(exc)}") from None


def is_reference(text: str) -> bool:
    """Whether ``text`` is written ``module:function`` (dotted names both)."""
    module, _, name = text.partition(":")
    return all(part.isidentifier() for part in [*module.split("."), *name.split(".")])


def resolve(text: str) -> Callable[..., Any]:
    """The callable ``module:function`` names; else a BackendError saying why."""
    module, _, name = text.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise BackendError(f"{text!r} cannot be resolved: {describe_error(exc)}") from None
    if not callable(found):
        raise BackendError(f"{text!r} is {type(found).__name__}, not callable")
    return found

