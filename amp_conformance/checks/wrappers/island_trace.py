"""What a float32 island computed, seen below autocast, and the parts it declares.

A dispatch mode below autocast records each op the island runs with the dtypes of its
floating outputs. An island's computation has up to three parts: what comes before its
float32 core (from the first op: ``before``), the core itself (from the first op computing
in float32 to the first cast of a value the core computed to another dtype), and what comes
after (``ending``). The core must compute in float32; the parts before and after in what
the declaration says (the input's dtype or the caller's region's), float32 always allowed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.core import devices
from amp_conformance.core.casting import tensors_in

aten = torch.ops.aten
#: ops that change no value's precision: a cast, a copy (a concatenation too), a view, a
#: sign flip (exact in any dtype)
CASTS = {aten._to_copy.default, aten.copy_.default, aten.clone.default, aten.detach.default,
         aten.lift_fresh.default, aten.alias.default, aten._unsafe_view.default,
         aten.cat.default, aten.stack.default, aten.neg.default}


class Raised(Exception):
    """Raised by the trace at the island's first computing op."""


class Trace(TorchDispatchMode):
    """The ops run below autocast, each with the dtypes of its floating outputs, and where
    the float32 core ended (the first cast of a value it computed in float32 to another
    floating dtype); with ``raise_first``, raises :class:`Raised` at the first op that
    computes."""

    def __init__(self, raise_first: bool = False, sources: Any = None):
        super().__init__()
        self.ops: list[tuple[str, tuple[torch.dtype, ...]]] = []
        self.raise_first = raise_first
        self.core_end: int | None = None
        #: per op, whether it took a floating tensor that comes from ``sources`` (the inputs
        #: sent as the region's activations; None: any floating tensor): work on a
        #: parameter, a constant or an argument always made in float32 alone prepares the
        #: core, it does not start it
        self.fed: list[bool] = []
        self._computed: dict[int, torch.Tensor] = {}  # kept alive: ids stay unique
        self._sourced: dict[int, torch.Tensor] | None = None if sources is None else {
            id(t): t for t in tensors_in(sources) if t.is_floating_point()}

    def _fed(self, args: Any, out: list[torch.Tensor]) -> bool:
        given = [a for a in tensors_in(args) if a.is_floating_point()]
        if self._sourced is None:
            return bool(given)
        sourced = any(id(a) in self._sourced for a in given)
        if sourced:
            self._sourced.update((id(t), t) for t in out)
        return sourced

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        computes = func not in CASTS and not getattr(func, "is_view", False)
        if computes and self.raise_first:
            raise Raised(f"raised inside the island, at {func}")
        out = func(*args, **(kwargs or {}))
        floating = [t for t in tensors_in(out) if t.is_floating_point()]
        fed = self._fed((args, kwargs), floating)
        if computes:
            self.ops.append((str(func), tuple(t.dtype for t in floating)))
            self.fed.append(fed)
            self._computed.update((id(t), t) for t in floating)
            return out
        computed = [a for a in tensors_in(args) if id(a) in self._computed]
        if self.core_end is None and any(a.dtype == torch.float32 for a in computed) \
                and any(t.dtype != torch.float32 for t in floating):
            self.core_end = len(self.ops)
        if computed:  # a cast or view of a computed value is one too
            self._computed.update((id(t), t) for t in floating)
        return out

    def rounded(self) -> int:
        """How many ops computed in a lower precision (each rounds what crosses it)."""
        return sum(any(d in devices.LOWER_DTYPES for d in dtypes) for _, dtypes in self.ops)

    @property
    def core_start(self) -> int | None:
        """The first op that computed in float32 from a floating tensor of the sources (None:
        none did)."""
        return next((i for i, (_, dtypes) in enumerate(self.ops)
                     if torch.float32 in dtypes and self.fed[i]), None)

    def lower(self, dtype: torch.dtype = torch.float32,
              ending: tuple[torch.dtype, ...] = (),
              before: tuple[torch.dtype, ...] = ()) -> str | None:
        """The first op that computed in another dtype than its part allows (the core:
        ``dtype``; before the core, also ``before``; after its end, also ``ending``),
        described; with ``before`` declared, also an island that computed nothing in
        float32 (no core)."""
        start = self.core_start
        if before and start is None and any(self.fed):
            return "no op computed in float32: it has no float32 core"
        for i, (name, dtypes) in enumerate(self.ops):
            if before and i < start:
                allowed, part = {dtype, *before}, "before its float32 core"
            elif ending and self.core_end is not None and i >= self.core_end:
                allowed, part = {dtype, *ending}, "after its float32 core"
            else:
                allowed = {dtype}
                part = ("before its float32 core ended" if ending else
                        "in its float32 core" if before else "")
            if any(d not in allowed for d in dtypes):
                named = " or ".join(devices.dtype_name(d) for d in sorted(allowed, key=str))
                return (f"{name} computed in {', '.join(devices.dtype_name(d) for d in dtypes)}"
                        f", not {named}" + (f" ({part})" if part else ""))
        return None


def run_traced(island: Any, xs: tuple[Any, ...], raise_first: bool = False,
               sources: Any = None) -> tuple[Trace, Any]:
    with Trace(raise_first, sources) as trace:
        out = island(*xs)
    return trace, out
