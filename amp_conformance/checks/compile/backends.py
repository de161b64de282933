"""The torch.compile backends the compile checks run, and a clean dynamo for each check.

``eager`` and ``aot_eager`` run the traced ATen ops with the eager kernels, so their
results must equal eager's bit for bit; a backend that generates code (``inductor``,
a vendor's) may reorder arithmetic, so its results are compared with tolerances.
``torch._dynamo`` is imported only when a check runs: collecting the suite stays cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

#: backends that run the eager kernels on the traced graph: bitwise agreement with eager
BITWISE = ("eager", "aot_eager")
#: backends the region scenarios always run (cheap: the compile machinery, not codegen)
REGION_BACKENDS = BITWISE
#: the most graphs dynamo may compile for one frame within a check; past it dynamo would
#: silently fall back to eager, so a check also asserts how many graphs it compiled
RECOMPILE_LIMIT = 8


class UnknownBackend(ValueError):
    """A backend name torch.compile does not know."""


def allowed() -> tuple[str, ...]:
    """What ``--amp-compile`` accepts: dynamo's listed backends (``inductor``, a vendor's
    registered through the ``torch_dynamo_backends`` entry point or a ``--backend-module``)
    plus ``eager`` and ``aot_eager``, which dynamo lists only among its debug backends."""
    from torch._dynamo import list_backends

    return tuple(sorted(set(list_backends()) | set(BITWISE)))


def validate(name: str) -> str:
    """``name`` if torch.compile knows it; UnknownBackend naming the allowed ones otherwise."""
    known = allowed()
    if name not in known:
        raise UnknownBackend(f"--amp-compile {name!r}: torch.compile has no such backend; "
                           f"allowed: {', '.join(known)}")
    return name


def numerics_for(backend: str, numerics: str) -> str:
    """How a backend's results compare with eager's: the run's rule for the backends that
    run eager kernels, tolerances for the ones that generate code."""
    return numerics if backend in BITWISE else "close"


def generates_code(backend: str) -> bool:
    return backend not in BITWISE


@dataclass
class CompileStats:
    """What dynamo did inside one :func:`compiling` block (read inside it)."""

    final: int | None = None

    @property
    def graphs(self) -> int:
        """Graphs compiled so far in the block (0: everything ran eagerly)."""
        if self.final is not None:
            return self.final
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])


def _limit_name() -> str:
    from torch._dynamo import config

    # renamed from cache_size_limit in torch 2.6
    return "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"


@contextlib.contextmanager
def compiling() -> Iterator[CompileStats]:
    """A clean dynamo for one check: no graph or guard of an earlier check can be reused,
    none is left behind for a later one, and recompiles are bounded. ``graphs`` is the
    number of graphs compiled inside the block (0: dynamo ran nothing compiled)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    stats = CompileStats()
    torch._dynamo.reset()
    counters.clear()
    try:
        with torch._dynamo.config.patch(**{_limit_name(): RECOMPILE_LIMIT}):
            try:
                yield stats
            finally:
                stats.final = stats.graphs
    finally:
        torch._dynamo.reset()
        counters.clear()
