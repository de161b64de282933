"""The torch.compile backends the compile checks run, and a clean dynamo for each check.

``eager`` and ``aot_eager`` run the traced ATen ops with the eager kernels, so their
results must equal eager's bit for bit; a backend that generates code (``inductor``,
a vendor's) may reorder arithmetic, so its results are compared with tolerances
(:func:`compare_outputs`).
``torch._dynamo`` is imported only when a check runs: collecting the suite stays cheap.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.core.compare import compare

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


#: a code generator's float16/bfloat16 result may differ from eager's by this many units
#: of the dtype's eps at the scale of the output's largest magnitude (see codegen_tolerance)
CODEGEN_ULPS = 2
#: torch.testing.assert_close's rtol for the lower-precision dtypes (kept as is)
_LOWER_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2}


def codegen_tolerance(expected: torch.Tensor) -> dict[str, float] | None:
    """The tolerance of a code-generating backend's float16/bfloat16 output (None: the
    assert_close defaults, for every other dtype).

    Eager kernels round intermediates the generated code keeps in float32, or accumulate in
    another order (cuBLAS's gemv, the Half arithmetic of CUDA's addr kernel, a float16
    product summed in float32): each is about one rounding of a value of the size of the
    terms, which the output's largest magnitude measures, not of the output element itself
    (near zero after cancellation, where a relative tolerance admits nothing). So atol is
    ``CODEGEN_ULPS`` eps of the dtype at that scale (at least assert_close's 1e-5) and
    rtol stays assert_close's: one rounding apart on each side passes. Emulated on 4000
    random inputs per op (addr, addmv, mv, vecdot, 8x8 mm, entry shapes): one extra rounding
    differs by at most 1.5 such units, float16 accumulation by at most 2.6 (p99.9 under
    2). A float16 result computed through bfloat16 is off by up to 4 units (median 3-3.5),
    a wrong op or a 1% error in float16 by tens; a wrong dtype fails before any value is
    compared. Unverified on a GPU: chosen for the inductor mismatches seen there (1 to 3
    elements of addr, addmv, mv, linalg_vecdot and the outer_region / ambient_changes
    scenarios, torch 2.11.0+cu130, H100)."""
    rtol = _LOWER_RTOL.get(expected.dtype)
    if rtol is None or expected.numel() == 0:
        return None
    magnitudes = expected.detach().float().abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    atol = CODEGEN_ULPS * torch.finfo(expected.dtype).eps * float(magnitudes.max())
    return {"rtol": rtol, "atol": max(1e-5, atol)}


def compare_outputs(actual: Any, expected: Any, backend: str, numerics: str,
                    tolerance: Any, what: str) -> None:
    """Compiled vs eager outputs of any nesting: the run's rule (``compare``) for the
    backends that run eager kernels or where the entry sets its own ``tolerance``; for a
    code generator, :func:`codegen_tolerance` per lower-precision tensor."""
    if not generates_code(backend) or tolerance is not None:
        compare(actual, expected, numerics, tolerance, what)
    elif isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        compare(actual, expected, "close", codegen_tolerance(expected), what)
    elif (isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple))
          and len(actual) == len(expected)):
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            compare_outputs(a, e, backend, numerics, None, f"{what}[{i}]")
    elif (isinstance(expected, dict) and isinstance(actual, dict)
          and list(actual) == list(expected)):
        for key, e in expected.items():
            compare_outputs(actual[key], e, backend, numerics, None, f"{what}[{key!r}]")
    else:  # a structure mismatch or a non-tensor: compare names it
        compare(actual, expected, "close", None, what)


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


def compiles_nothing() -> str | None:
    """Why dynamo compiles no frame here, or None: it skips every frame while a dispatch
    mode other than its own infrastructure's is active (a backend of Python modes)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    modes = [m for m in _get_current_dispatch_mode_stack()
             if not getattr(m, "is_infra_mode", lambda: False)()]
    if not modes:
        return None
    names = ", ".join(type(m).__qualname__ for m in modes)
    return (f"not applicable: dynamo compiles nothing here, it skips every frame while a "
            f"torch dispatch mode is active ({names})")


def _limit_name() -> str:
    from torch._dynamo import config

    # renamed from cache_size_limit in torch 2.6
    return "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"


#: PyTorch's compile caches that outlive a dynamo reset (on disk, shared by processes):
#: (config module, flag), each where the running torch has it
_CACHES = (("torch._inductor.config", "fx_graph_cache"),
           ("torch._functorch.config", "enable_autograd_cache"))


@contextlib.contextmanager
def _compile_caches(on: bool) -> Iterator[None]:
    """PyTorch's compile caches off, or on in a folder of the block's own: either way no
    artifact of another check or process can serve this one, and none is left for them."""
    import importlib

    with contextlib.ExitStack() as stack:
        for module_name, flag in _CACHES:
            module = importlib.import_module(module_name)
            if hasattr(module, flag):
                stack.enter_context(module.patch(**{flag: on}))
        if on:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="amp-compile-"))
            stack.enter_context(_environ("TORCHINDUCTOR_CACHE_DIR", folder))
        yield


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@contextlib.contextmanager
def _untimed_guards() -> Iterator[None]:
    """Dynamo times every new set of guards once, for its logs alone
    (``torch._dynamo.guards.profile_guard_manager``, after flushing the CPU's caches): about
    a third of a small function's compile. The checks read no such log; the guards are
    still built and checked as always."""
    guards = sys.modules.get("torch._dynamo.guards")
    profile = getattr(guards, "profile_guard_manager", None)
    if profile is None:
        yield
        return
    guards.profile_guard_manager = lambda *args, **kwargs: 0.0
    try:
        yield
    finally:
        guards.profile_guard_manager = profile


@contextlib.contextmanager
def compiling(caches: bool = False) -> Iterator[CompileStats]:
    """A clean dynamo for one check: no graph or guard of an earlier check can be reused,
    none is left behind for a later one, and recompiles are bounded; PyTorch's compile
    caches are off (with ``caches``: on, in a folder of the block's own). ``graphs`` is the
    number of graphs compiled inside the block (0: dynamo ran nothing compiled)."""
    import torch._dynamo
    import torch._dynamo.guards  # noqa: F401 - its guard timing is left out (_untimed_guards)
    from torch._dynamo.utils import counters

    stats = CompileStats()
    torch._dynamo.reset()
    counters.clear()
    try:
        with torch._dynamo.config.patch(**{_limit_name(): RECOMPILE_LIMIT}), \
                _compile_caches(caches), _untimed_guards():
            try:
                yield stats
            finally:
                stats.final = stats.graphs
    finally:
        torch._dynamo.reset()
        counters.clear()
