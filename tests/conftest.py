"""Shared set-up of the project's own tests."""

import pytest
from _pytest import pytester as _pytester


def _is_torch_module(name: str) -> bool:
    """torch and the modules it imports lazily and keys caches on (sympy, mpmath)."""
    return any(name == top or name.startswith(top + ".") for top in ("torch", "sympy", "mpmath"))


@pytest.fixture(autouse=True)
def _keep_torch_modules_across_inline_runs(monkeypatch):
    """pytester's in-process runs drop the modules a run imported; torch modules imported
    again re-register their operator libraries, which torch refuses. Keep them."""
    original = _pytester.SysModulesSnapshot.__init__

    def init(self, preserve=None):
        original(self, lambda name: _is_torch_module(name) or bool(preserve and preserve(name)))

    monkeypatch.setattr(_pytester.SysModulesSnapshot, "__init__", init)
