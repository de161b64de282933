"""Every higher-order op of the running torch: a scenario where a user reaches it, or why
none does.

A scenario calls the HOP through the API a user calls (``torch.cond``,
``torch._higher_order_ops.scan``, ``flex_attention``, ``torch.utils.checkpoint`` under
``torch.compile``, …) on subgraphs with autocast regions of their own inside (an
``enabled=False`` region, a region of the other amp dtype), and says what the same
computation is without the HOP (``plain``). The check holds the HOP to it inside the
device's autocast, eagerly and compiled.

A HOP the running torch registers that is neither a scenario nor in :data:`INTERNAL`
fails the coverage item: a new HOP is noticed as a new policy op is.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks.compile_regions.bodies import Env
from amp_conformance.schema.defects import KNOWN_DEFECT
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.versions import release

Fn = Callable[..., Any]
#: the items' "backend" that compiles nothing: the HOP called as it is
UNCOMPILED = "uncompiled"


@dataclass(frozen=True)
class Inputs:
    """A scenario's tensors: a matrix, a weight, and a stack of two matrices."""

    x: torch.Tensor
    w: torch.Tensor
    xs: torch.Tensor


@dataclass(frozen=True)
class Known:
    """A defect of ``oplists/defects.toml`` the HOP shows: with ``backend`` (``"*"``: every
    one), from release ``since`` on, on real devices, fake ones or both (``fake`` None)."""

    defect: str
    backend: str = "*"
    since: str | None = None
    fake: bool | None = None

    def shown(self, backend: str, fake: bool, version: str | None = None) -> bool:
        return (self.backend in (backend, "*") and self.fake in (None, fake)
                and (self.since is None or release(version) >= self.since)
                and defect_registry()[self.defect].applies(version))


@dataclass(frozen=True)
class Hop:
    """One HOP as a user reaches it.

    - ``call(env, inputs)`` / ``plain(env, inputs)``: the function through the HOP, and the
      same computation without it, each called with no argument;
    - ``api``: what the user calls; ``since``: the first release that has it;
    - ``eager``: whether the uncompiled call goes through the HOP (``checkpoint`` and
      ``nested_compile_region`` become one only under torch.compile);
    - ``close``: the HOP computes another way than ``plain`` (flex_attention's own kernel
      against scaled_dot_product_attention's): values to the amp dtype's precision;
    - ``known``: each PyTorch defect the HOP shows (:class:`Known`); before the defect's
      ``fixed`` release the item is a strict xfail, so a fix is noticed.
    """

    name: str
    api: str
    call: Callable[[Env, Inputs], Fn]
    plain: Callable[[Env, Inputs], Fn]
    since: str | None = None
    eager: bool = True
    close: bool = False
    known: tuple[Known, ...] = ()

    def known_defect(self, backend: str, fake: bool = False, version: str | None = None
                     ) -> str | None:
        """Why the item fails with ``backend`` on the running torch (or ``version``): the
        PyTorch defect it shows there, or None."""
        for known in self.known:
            if known.shown(backend, fake, version):
                defect = defect_registry()[known.defect]
                return f"{KNOWN_DEFECT}{defect.cite()}: {defect.summary}"
        return None


def region(env: Env, which: str | None = "amp", enabled: bool = True
           ) -> contextlib.AbstractContextManager:
    """A region of the device (on a fake device, the state switched as torch.autocast
    would: eager only)."""
    return env.target.autocast(env.dtype_of(which), enabled=enabled)


def body(env: Env, w: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A subgraph with regions of its own: mm in the ambient region, in an ``enabled=False``
    region (float32), and in a region of the other amp dtype (read back as float32, so a
    HOP that stacks it does not meet the promote policy's mixed-dtype defect)."""
    a = torch.mm(h, w)
    with region(env, enabled=False):
        b = torch.mm(h.float(), w)
    if env.other is None:
        return a, b
    with region(env, "other"):
        c = torch.mm(h, w)
    return a, b, c.float()


def _stack(outs: list[tuple]) -> tuple:
    return tuple(torch.stack(ts) for ts in zip(*outs, strict=True))


# -- the calls, and the same computation without the HOP ---------------------------------


def _cond(env: Env, i: Inputs) -> Fn:
    f = functools.partial(body, env, i.w)
    return lambda: torch.cond(i.x.sum() > 0, f, lambda h: f(h * 2), (i.x,))


def _cond_plain(env: Env, i: Inputs) -> Fn:
    f = functools.partial(body, env, i.w)
    return lambda: f(i.x) if bool(i.x.sum() > 0) else f(i.x * 2)


def _start(env: Env, i: Inputs) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros((), dtype=torch.int64, device=i.x.device), i.x.to(env.dtype)


def _switch(env: Env, i: Inputs) -> Fn:
    f = functools.partial(body, env, i.w)
    return lambda: torch.switch(1, (lambda h: f(h * 2), f, lambda h: f(-h)), (i.x,))


def _flex_gemm(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops import flex_gemm
    return lambda: flex_gemm(torch.mm, (i.x, i.w), torch.relu)


def _flex_gemm_plain(env: Env, i: Inputs) -> Fn:
    return lambda: torch.relu(torch.mm(i.x, i.w))


def _while_loop(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops import while_loop

    def step(n: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return n + 1, acc + torch.mm(acc, i.w)  # the amp dtype only while autocast holds
    return lambda: while_loop(lambda n, acc: n < 2, step, _start(env, i))


def _while_loop_plain(env: Env, i: Inputs) -> Fn:
    def run() -> tuple[torch.Tensor, torch.Tensor]:
        n, acc = _start(env, i)
        for _ in range(2):
            n, acc = n + 1, acc + torch.mm(acc, i.w)
        return n, acc
    return run


def _scan_step(env: Env, i: Inputs, carry: torch.Tensor, y: torch.Tensor) -> tuple:
    return carry + torch.mm(y, i.w).float(), body(env, i.w, y)


def _scan(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops import scan
    return lambda: scan(functools.partial(_scan_step, env, i), i.x, i.xs)


def _scan_plain(env: Env, i: Inputs) -> Fn:
    def run() -> tuple:
        carry, outs = i.x, []
        for y in i.xs:
            carry, out = _scan_step(env, i, carry, y)
            outs.append(out)
        return carry, _stack(outs)
    return run


def _map(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops.map import map as hop_map
    return lambda: hop_map(functools.partial(body, env, i.w), i.xs)


def _map_plain(env: Env, i: Inputs) -> Fn:
    return lambda: _stack([body(env, i.w, y) for y in i.xs])


def _combine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b).float()  # associative up to rounding; float32 between steps


def _associative_scan(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops import associative_scan
    return lambda: associative_scan(_combine, i.xs, 0, combine_mode="generic")


def _associative_scan_plain(env: Env, i: Inputs) -> Fn:
    def run() -> torch.Tensor:
        outs = [i.xs[0]]
        for y in i.xs[1:]:
            outs.append(_combine(outs[-1], y))
        return torch.stack(outs)
    return run


def _flex_attention(env: Env, i: Inputs) -> Fn:
    from torch.nn.attention.flex_attention import flex_attention
    return lambda: flex_attention(*(i.xs.unsqueeze(0),) * 3)


def _flex_attention_plain(env: Env, i: Inputs) -> Fn:
    return lambda: torch.nn.functional.scaled_dot_product_attention(*(i.xs.unsqueeze(0),) * 3)


def _checkpoint(env: Env, i: Inputs) -> Fn:
    from torch.utils.checkpoint import checkpoint
    f = functools.partial(body, env, i.w)
    return lambda: checkpoint(f, i.x, use_reentrant=False)


def _subgraph(env: Env, i: Inputs) -> Fn:
    @torch.compiler.nested_compile_region
    def sub(w: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return body(env, w, h)
    return lambda: sub(i.w, i.x)


def _wrap(env: Env, i: Inputs) -> Fn:
    from torch._higher_order_ops.wrap import wrap
    return lambda: wrap(functools.partial(body, env, i.w), i.x)


def _plain(env: Env, i: Inputs) -> Fn:
    return lambda: body(env, i.w, i.x)


HOPS: tuple[Hop, ...] = (
    Hop("cond", "torch.cond", _cond, _cond_plain),
    Hop("switch", "torch.switch", _switch, _plain, since="2.15"),
    Hop("while_loop", "torch._higher_order_ops.while_loop", _while_loop, _while_loop_plain),
    Hop("scan", "torch._higher_order_ops.scan", _scan, _scan_plain, since="2.7"),
    Hop("map_impl", "torch._higher_order_ops.map.map", _map, _map_plain,
        known=(Known("map-drops-inner-regions", UNCOMPILED),
               Known("map-drops-inner-regions", "aot_eager", since="2.7"))),
    Hop("associative_scan", "torch._higher_order_ops.associative_scan (combine_mode="
        "'generic')", _associative_scan, _associative_scan_plain, since="2.7", close=True),
    Hop("flex_attention", "torch.nn.attention.flex_attention.flex_attention", _flex_attention,
        _flex_attention_plain, close=True,
        # uncompiled on a fake device, FakeTensorMode runs the HOP, not its dense ops
        known=(Known("flex-attention-compiled-drops-autocast", "aot_eager"),
               Known("flex-attention-compiled-drops-autocast", UNCOMPILED, fake=True))),
    Hop("tag_activation_checkpoint", "torch.utils.checkpoint.checkpoint (use_reentrant="
        "False) under torch.compile", _checkpoint, _plain, eager=False),
    Hop("invoke_subgraph", "torch.compiler.nested_compile_region under torch.compile",
        _subgraph, _plain, since="2.8", eager=False),
    Hop("wrap", "torch._higher_order_ops.wrap.wrap", _wrap, _plain),
    Hop("flex_gemm", "torch._higher_order_ops.flex_gemm (a gemm and its epilogue)", _flex_gemm,
        _flex_gemm_plain, since="2.15"),
)

#: the HOPs no user calls: each with what makes it, where its autocast is checked if at all
INTERNAL: dict[str, str] = {
    "wrap_with_autocast": "made by torch.export (pre-dispatch) for an autocast region it "
                          "keeps; checked by compile_regions' export items",
    "wrap_with_set_grad_enabled": "made by torch.export (pre-dispatch) for a grad-mode region",
    "wrap_activation_checkpoint": "made by torch.compile's selective activation checkpointing",
    "while_loop_stack_output": "while_loop's variant for its own backward",
    "flex_attention_backward": "flex_attention's backward, made by its autograd",
    "autograd_function_apply": "made by dynamo for a traced torch.autograd.Function "
                               "(custom_fwd/custom_bwd: the custom_fwd family)",
    "auto_functionalized": "made by functionalization for a mutating custom op",
    "auto_functionalized_v2": "made by functionalization for a mutating custom op",
    "with_effects": "made by functionalization for an op with side effects",
    "invoke_quant": "made by inductor's quantization passes",
    "invoke_quant_packed": "made by inductor's quantization passes",
    "out_dtype": "quantization's integer matmul with a declared output dtype",
    "inductor_compiled_code": "wraps code inductor compiled",
    "triton_kernel_wrapper_mutation": "wraps a user Triton kernel (no CPU kernel here)",
    "triton_kernel_wrapper_functional": "wraps a user Triton kernel (no CPU kernel here)",
    "run_const_graph": "made by torch.export for constant folding",
    "_export_tracepoint": "made by torch.export for module boundaries",
    "strict_mode": "made by torch.export's strict mode",
    "hints_wrapper": "carries compiler hints around a subgraph",
    "print": "made by torch._higher_order_ops.print for a compiled print",
    "call_torchbind": "calls a TorchScript class method",
    "executorch_call_delegate": "ExecuTorch's lowered module (falls through autocast)",
    "aoti_call_delegate": "AOTInductor's lowered module (falls through autocast)",
    "flat_apply": "dynamo's call of a function with non-tensor inputs",
    "custom_function_call": "functorch's torch.autograd.Function under a transform",
    "dynamo_bypassing_wrapper": "dynamo's wrapper of a function it must not trace",
    "graphsafe_run_with_rng_state": "CUDA graphs' replay of a region with its RNG state",
    "run_and_save_rng_state": "activation checkpointing's RNG bookkeeping",
    "run_with_rng_state": "activation checkpointing's RNG bookkeeping",
    "run_dtensor_rng_op": "DTensor's random op",
    "inline_asm_elementwise": "inductor's inline assembly",
    "invoke_leaf_function": "dynamo's leaf function",
    "local_map_hop": "DTensor's local_map",
    "foreach_map": "inductor's horizontal fusion of foreach ops",
    "control_deps": "inductor's ordering of nodes in a graph it schedules",
    "trace_wrapped": "compiled autograd's traced hook",
    "register_hook": "a tensor hook registered inside traced code",
    "map": "the outer HOP of torch._higher_order_ops.map in releases before 2.7 (it calls "
           "map_impl, which runs the body)",
}


#: the modules that define HOPs outside torch._higher_order_ops, imported before the HOPs
#: are read, so a run sees the same ones whatever its items imported first
DEFINING = ("torch._dynamo._trace_wrapped_higher_order_op",
            "torch._inductor.fx_passes.control_dependencies", "torch._prims.rng_prims",
            "torch.utils.checkpoint", "torch._functorch.autograd_function",
            "torch.nn.attention.flex_attention")


def registered() -> list[str]:
    """Every HOP the running torch registers: torch._higher_order_ops' modules and
    :data:`DEFINING` imported (those a release lacks are passed over)."""
    import importlib
    import pkgutil

    import torch._higher_order_ops as package
    from torch._ops import _higher_order_ops

    names = [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    for name in (*names, *DEFINING):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    return sorted(_higher_order_ops)
