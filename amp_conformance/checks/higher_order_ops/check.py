"""One HOP, inside the device's autocast, uncompiled or through one torch.compile backend,
against the same computation without it (eager, inside the same region).

Outputs must have the same dtypes and shapes, and values bitwise (the HOP runs the same
kernels on the same inputs; with a code generator, or where the HOP computes another way,
to the amp dtype's precision); an error the plain computation does not raise is a
failure, the same error a pass. The autocast state after the call must be what it was
before. Compiled with ``fullgraph=True``: a HOP dynamo cannot trace is an error, not a
silent fall back to eager.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks import compiling, defects
from amp_conformance.checks.compile_regions.bodies import Env
from amp_conformance.checks.compile_regions.regions import other_dtype
from amp_conformance.checks.higher_order_ops.hops import (
    HOPS,
    INTERNAL,
    UNCOMPILED,
    Hop,
    Inputs,
    registered,
)
from amp_conformance.core import devices
from amp_conformance.core.casting import map_tensors
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, NotApplicable, describe_error
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target, fake_runtime
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.versions import release

#: flex_attention's kernel and scaled_dot_product_attention's round differently
_CLOSE = {torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2}, torch.float16: {"rtol": 1e-3, "atol": 1e-3}}


#: the backend every run compiles the HOPs with: dynamo's tracing of the subgraphs and
#: AOTAutograd's of the HOP (``--amp-compile eager`` adds dynamo's graph run as it is)
DEFAULT_BACKENDS = ("aot_eager",)


def backends(chosen: str | None) -> tuple[str, ...]:
    """Uncompiled, aot_eager, and the ``--amp-compile`` backend."""
    return (UNCOMPILED, *DEFAULT_BACKENDS,
            *((chosen,) if chosen and chosen not in DEFAULT_BACKENDS else ()))


def by_name(name: str) -> Hop:
    return next(h for h in HOPS if h.name == name)


def not_applicable(hop: Hop, target: Target, backend: str) -> str | None:
    """Why the item does not apply here, or None."""
    if hop.since is not None and release() < hop.since:
        return (f"not applicable: {hop.api} came in torch {hop.since}, this is "
                f"{torch.__version__}")
    if backend == UNCOMPILED and not hop.eager:
        return (f"not applicable: {hop.api} is the HOP {hop.name} only under torch.compile; "
                "uncompiled it is the plain call")
    if backend != UNCOMPILED and target.fake:
        return (f"not applicable in --fake mode: torch.autocast({target.device!r}) refuses "
                "the absent device, so no region inside the HOP's subgraph is traced")
    return None


def _inputs(target: Target) -> Inputs:
    if target.fake:
        return Inputs(*(torch.empty(shape, device=target.device)
                        for shape in ((4, 4), (4, 4), (2, 4, 4))))
    g = torch.Generator().manual_seed(0)
    return Inputs(*(torch.randn(shape, generator=g).to(target.device)
                    for shape in ((4, 4), (4, 4), (2, 4, 4))))


def _run(fn: Any, env: Env, enabled: bool = True) -> tuple[Any, BaseException | None, list[str]]:
    """``fn()`` inside the region (``enabled=False``: a disabled one): its output or error,
    and what it left of the state."""
    with env.target.autocast(env.dtype, enabled=enabled), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # flex_attention's "called without torch.compile"
        before = AutocastState.capture(env.device)
        out, error = None, None
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - compared with the plain computation's
            error = exc
        leaked = list(before.diff(AutocastState.capture(env.device)))
        before.restore()
    return out, error, leaked


#: a HOP has fallthrough kernels for AutocastCPU, AutocastCUDA and AutocastXPU only: inside
#: another device's autocast one without a kernel of its own raises this (a PyTorch defect)
NO_KERNEL = "could not find kernel for HigherOrderOperator"
NO_KERNEL_DEFECT = "hop-no-autocast-kernel-off-cpu-cuda-xpu"


def check(hop: Hop, target: Target, dtype: torch.dtype, backend: str,
          numerics: str = "bitwise", record: Callable[[str, Any], None] = lambda *_: None
          ) -> None:
    """The HOP against the same computation without it; ConformanceFailure naming the HOP,
    its API, the backend and what differs. Where it raises PyTorch's own missing-kernel
    error for the device's Autocast key, the defect is reproduced (``record``ed)."""
    env = Env(target, dtype, other_dtype(target, dtype))
    where = (f"higher-order op {hop.name} ({hop.api}), "
             f"{'uncompiled' if backend == UNCOMPILED else f'compiled with {backend}'}, on "
             f"{target}, inside autocast {dtype}")
    if backend != UNCOMPILED:
        blocked = compiling.compiles_nothing()
        if blocked:
            raise NotApplicable(blocked)
    with target.tensors():
        inputs = _inputs(target)
        want, plain_error, _ = _run(hop.plain(env, inputs), env)
        if plain_error is not None and fake_runtime(target, plain_error):
            raise NotApplicable(f"not applicable in --fake mode: the computation without the "
                                f"HOP needs the absent device's runtime: "
                                f"{describe_error(plain_error, 160)}")
        with compiling.compiling() if backend != UNCOMPILED else contextlib.nullcontext():
            fn = hop.call(env, inputs)
            if backend != UNCOMPILED:
                fn = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
            got, error, leaked = _run(fn, env)
            if error is not None and not _same(error, plain_error):
                _, outside, _ = _run(fn, env, enabled=False)
                if outside is not None and _same(outside, error):
                    raise NotApplicable(f"not applicable: {where.split(', inside')[0]} raises "
                                        f"outside autocast too: {describe_error(error, 200)}")
                if outside is not None and target.fake:  # the fake device cannot run it at all
                    raise NotApplicable(
                        f"not applicable in --fake mode: {where.split(', inside')[0]} does not "
                        f"run under FakeTensorMode outside autocast either "
                        f"({describe_error(outside, 160)}); inside it raises "
                        f"{describe_error(error, 160)}")
    if error is not None and plain_error is None and _no_kernel(error, target):
        record(defects.PROPERTY, defects.record_of(NO_KERNEL_DEFECT, defects.REPRODUCED))
        print(f"{where}: reproduces {NO_KERNEL_DEFECT}: {describe_error(error, 300)}")
        return
    problems = []
    if error is not None or plain_error is not None:
        if not _same(error, plain_error):
            problems.append(f"it {_said(error)}, the computation without it {_said(plain_error)}")
    else:
        problems += _differs(got, want, hop, backend, numerics, target, dtype)
    if leaked:
        problems.append("the autocast state after the call differs: " + "; ".join(leaked))
    if problems:
        raise ConformanceFailure(f"{where}:\n" + "\n".join(f"  {p}" for p in problems))


def _no_kernel(error: BaseException, target: Target) -> bool:
    """Whether ``error`` is the HOP's missing kernel for the device's Autocast key, while
    the running torch still has that defect."""
    key = devices.dispatch_key(target.device)
    # a key without a Python name (AutocastXLA) prints as "???"
    named = f"DispatchKey.{key}" if hasattr(torch._C.DispatchKey, key) else "DispatchKey.???"
    return (NO_KERNEL in str(error) and named in str(error)
            and defect_registry()[NO_KERNEL_DEFECT].applies())


def _same(one: BaseException | None, other: BaseException | None) -> bool:
    """Both raised, the same class and first line."""
    return (one is not None and other is not None and type(one) is type(other)
            and str(one).strip().split("\n")[0] == str(other).strip().split("\n")[0])


def _said(error: BaseException | None) -> str:
    return "runs" if error is None else f"raises {describe_error(error, 200)}"


def _differs(got: Any, want: Any, hop: Hop, backend: str, numerics: str, target: Target,
             dtype: torch.dtype) -> list[str]:
    shapes = map_tensors(lambda t: (str(t.dtype).removeprefix("torch."), tuple(t.shape)), got)
    wanted = map_tensors(lambda t: (str(t.dtype).removeprefix("torch."), tuple(t.shape)), want)
    try:
        compare(shapes, wanted, "bitwise", None, "output dtypes and shapes (HOP vs without it)")
        if target.has_values:
            if hop.close:
                compare(got, want, "close", _CLOSE.get(dtype), "values (HOP vs without it)")
            else:
                compiling.compare_outputs(got, want, backend if backend != UNCOMPILED else
                                          "eager", numerics, None, "values (HOP vs without it)")
    except ConformanceFailure as exc:
        return [str(exc)]
    return []


def uncovered() -> dict[str, str]:
    """Every HOP the running torch registers that is neither a scenario nor internal."""
    known = {h.name for h in HOPS} | set(INTERNAL)
    return {name: "no scenario and no reason it has none" for name in registered()
            if name not in known}


def check_coverage() -> None:
    missing = uncovered()
    if missing:
        raise ConformanceFailure(
            f"{len(missing)} higher-order ops of torch {torch.__version__} are neither run "
            f"under autocast nor declared internal (checks/higher_order_ops/hops.py): "
            + ", ".join(sorted(missing)))
