"""Whether a database of PyTorch's own tests (op_db, module_db) can be imported, asked
without importing it: an xdist controller runs no item of the tier that reads it, and the
import costs seconds; each worker imports it, as a serial run does, and fails on any other
import error."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable


def check_installed(names: Iterable[str], unavailable: Callable[[BaseException], Exception]
                    ) -> None:
    """Raise ``unavailable(why)`` for the first module of ``names`` that cannot be found."""
    for name in names:
        try:
            found = importlib.util.find_spec(name)
        except ImportError as exc:
            raise unavailable(exc) from None
        if found is None:
            raise unavailable(ModuleNotFoundError(f"No module named {name!r}"))
