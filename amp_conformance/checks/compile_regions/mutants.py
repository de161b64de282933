"""Mutants of the torch.compile / torch.export tier:
broken implementations its checks must catch.

Each breaks the compile machinery, never eager autocast: the traced region's dtype or
enabled flag (dynamo's ``AutocastModeVariable``), the region dynamo rebuilds after a graph
break (leaking its state when the body raises, or not entered for the eager code at the
break), an exception raised in a region under torch.export, non-strict or strict (lost for an
error of the export's own), the guard on the ambient autocast state
(a stale graph), a backend that drops the regions from the graph it is given, a call of an
autocast-decorated function or a legacy context that breaks the graph (caught by
``fullgraph=True``), and an AOTAutograd cache key blind to the autocast dtype.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from amp_conformance.checks.mutation import Mutant, Undo, patch, patches, register

_SWAP = {torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}


def _ctx_variable() -> Any:
    from torch._dynamo.variables.ctx_manager import AutocastModeVariable

    return AutocastModeVariable


def _traced_as(edit: Callable[[list], list]) -> Callable[[], Undo]:
    """Dynamo records every ``torch.autocast(...)`` it traces with ``edit(target_values)``
    ((device, dtype, enabled, cache_enabled)) instead of what the code says."""
    def apply() -> Undo:
        def make(original):
            def create(func, args, kwargs):
                var = original(func, args, kwargs)
                var.target_values = edit(list(var.target_values))
                return var
            return staticmethod(create)
        return patch(_ctx_variable(), "create", make)()
    return apply


def _legacy_positional_dropped() -> Undo:
    """Dynamo binds only the keyword arguments of torch.<device>.amp.autocast: a positional
    enabled/dtype/cache_enabled is traced as its default."""
    def make(original):
        def create(func, args, kwargs):
            if func is not torch.amp.autocast_mode.autocast:
                args = []
            return original(func, args, kwargs)
        return staticmethod(create)
    return patch(_ctx_variable(), "create", make)()


class _LeakyAutocast(torch.amp.autocast_mode.autocast):
    """Restores nothing when left because of an exception."""

    def __exit__(self, *exc: Any) -> Any:
        if sys.exc_info()[0] is not None:  # dynamo's finally block, an exception in flight
            return False
        return super().__exit__(*exc)


def _resumed_region_leaks() -> Undo:
    module = torch.amp.autocast_mode
    module._LeakyAutocast = _LeakyAutocast
    undo = patch(_ctx_variable(), "fn_name", lambda original: lambda self: "_LeakyAutocast")()

    def restore() -> None:
        undo()
        del module._LeakyAutocast
    return restore


class _InertAutocast:
    """A region that does nothing: what the eager code at a graph break runs in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _InertAutocast:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False


def _break_runs_without_region() -> Undo:
    """The eager code at a graph break runs outside the region: dynamo rebuilds the region
    around it as a class that does nothing (the traced code before and after keeps it)."""
    from torch._dynamo import symbolic_convert

    at_break = {"now": False}

    def around(original):
        def reconstruct(*args, **kwargs):
            at_break["now"] = True
            try:
                return original(*args, **kwargs)
            finally:
                at_break["now"] = False
        return reconstruct
    module = torch.amp.autocast_mode
    module._InertAutocast = _InertAutocast
    undo_stack = patch(symbolic_convert, "_reconstruct_block_stack", around)()
    undo_name = patch(_ctx_variable(), "fn_name", lambda original: lambda self: (
        "_InertAutocast" if at_break["now"] else original(self)))()

    def restore() -> None:
        undo_name()
        undo_stack()
        del module._InertAutocast
    return restore


def _export_swallows_region_error() -> Undo:
    """Leaving a region with an exception in flight while torch.export traces raises an
    error of its own instead: the module's exception is lost."""
    def make(original):
        def __exit__(self, exc_type, exc, tb):
            result = original(self, exc_type, exc, tb)
            if exc is not None and torch.compiler.is_exporting():
                raise RuntimeError("autocast region could not be exported") from None
            return result
        return __exit__
    return patch(torch.amp.autocast_mode.autocast, "__exit__", make)()


_TORCH = str(Path(torch.__file__).parent)


def _tracing_non_strict() -> bool:
    """Whether a region is entered by non-strict torch.export's trace of the user's code
    (strict export, and a decomposition, enter the regions of a graph from torch's own
    code)."""
    caller = sys._getframe(2).f_code.co_filename
    return (torch.compiler.is_exporting() and not torch.compiler.is_dynamo_compiling()
            and not caller.startswith(_TORCH))


def _non_strict_export_drops_regions() -> Undo:
    """Non-strict torch.export traces through a module's torch.autocast regions without
    entering them: its program runs their ops as if they were outside (strict export keeps
    them)."""
    def make_enter(original):
        def __enter__(self):
            if _tracing_non_strict():
                self._amp_dropped = True
                return self
            return original(self)
        return __enter__

    def make_exit(original):
        def __exit__(self, *args):
            if vars(self).pop("_amp_dropped", False):
                return False
            return original(self, *args)
        return __exit__
    autocast = torch.amp.autocast_mode.autocast
    return patches(patch(autocast, "__enter__", make_enter),
                   patch(autocast, "__exit__", make_exit))()


def _strict_export_swallows_region_error() -> Undo:
    """The region dynamo traces, left with an exception in flight (its ``__exit__`` given
    the exception), raises an error of its own: strict export loses the module's exception."""
    def make(original):
        def exit(self, tx, *args):
            if args and not (args[0].is_python_constant() and args[0].as_python_constant() is None):
                raise RuntimeError("autocast region could not be traced")
            return original(self, tx, *args)
        return exit
    return patch(_ctx_variable(), "exit", make)()


def _decorated_calls_skipped() -> Undo:
    """Dynamo skips torch/amp/autocast_mode.py as it skips torch's other files: a call of a
    function decorated with torch.autocast breaks the graph (pytorch#114818, before PR
    #114845 put the module on dynamo's inline list)."""
    from torch._dynamo import trace_rules

    module = "torch.amp.autocast_mode"
    trace_rules.MOD_INLINELIST.discard(module)
    trace_rules.clear_lru_cache()

    def restore() -> None:
        trace_rules.MOD_INLINELIST.add(module)
        trace_rules.clear_lru_cache()
    return restore


def _legacy_context_unsupported() -> Undo:
    """Dynamo cannot trace torch.<device>.amp.autocast: the legacy context breaks the graph
    (as it did before pytorch PR #95416)."""
    from torch._dynamo.exc import Unsupported

    def make(original):
        def create(func, args, kwargs):
            if func is not torch.amp.autocast_mode.autocast:
                raise Unsupported(f"{func.__module__}.{func.__qualname__} is not supported")
            return original(func, args, kwargs)
        return staticmethod(create)
    return patch(_ctx_variable(), "create", make)()


def _aot_cache_key_without_dtype() -> Undo:
    """The AOTAutograd cache key records which devices autocast is on for, not their
    dtypes (as before pytorch#181564)."""
    from torch._functorch._aot_autograd import autograd_cache

    def make(original):
        def record(self, gm):
            original(self, gm)
            self.autocast_state = dict.fromkeys(getattr(self, "autocast_state", {}), True)
        return record
    return patch(autograd_cache.AOTAutogradCacheDetails, "_record_runtime_state", make)()


def _guard_ignores_global_state() -> Undo:
    from torch._dynamo import guards

    return patch(guards.GuardBuilder, "GLOBAL_STATE", lambda original: lambda self, guard: None)()


def _drop_regions(backend: Callable) -> Callable:
    region_nodes = (torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast)

    def dropping(gm, example_inputs, **kwargs):
        for node in reversed(list(gm.graph.nodes)):  # each exit before its enter
            if node.op == "call_function" and node.target in region_nodes:
                gm.graph.erase_node(node)
        gm.recompile()
        return backend(gm, example_inputs, **kwargs)
    return dropping


def _backend_drops_regions() -> Undo:
    """aot_eager, but the autocast region nodes are removed from the graph first."""
    from torch._dynamo.backends import registry  # torch.compile(backend="...") looks up here

    def make(lookup):
        def lookup_backend(compiler_fn):
            found = lookup(compiler_fn)
            return _drop_regions(found) if compiler_fn == "aot_eager" else found
        return lookup_backend
    return patch(registry, "lookup_backend", make)()


register(Mutant(
    name="compile-region-other-dtype",
    description="dynamo traces torch.autocast(device, dtype) with the other amp dtype "
                "(bfloat16 <-> float16): the compiled region ignores its dtype",
    apply=_traced_as(lambda v: [v[0], _SWAP.get(v[1], v[1]), *v[2:]]),
    expect=("compile_regions scenario 'inner_region'", "attribute 'dtype' do not match"),
    select="test_compile_region and inner_region] and aot_eager",
))
register(Mutant(
    name="compile-region-traced-disabled",
    description="dynamo traces every torch.autocast region as enabled=False",
    apply=_traced_as(lambda v: [v[0], v[1], False, v[3]]),
    expect=("compile_regions scenario 'inner_region'", "attribute 'dtype' do not match"),
    select="test_compile_region and inner_region] and eager",
))
register(Mutant(
    name="compile-legacy-positional-ignored",
    description="dynamo traces torch.<device>.amp.autocast(enabled, dtype, cache_enabled) "
                "called positionally with its defaults instead of the arguments",
    apply=_legacy_positional_dropped,
    expect=("compile_regions scenario 'call_forms'", "['legacy-positional "),
    select="test_compile_region and call_forms and aot_eager",
))
register(Mutant(
    name="compile-decorated-call-breaks-graph",
    description="dynamo skips torch.amp.autocast_mode: calling a function decorated with "
                "torch.autocast inside compiled code breaks the graph (pytorch#114818; the "
                "dtypes stay right, fullgraph=True raises)",
    apply=_decorated_calls_skipped,
    expect=("compile_regions scenario 'decorated_calls'", "compiled call raised Unsupported"),
    select="test_compile_region and decorated_calls",
))
register(Mutant(
    name="compile-legacy-context-breaks-graph",
    description="dynamo cannot trace torch.<device>.amp.autocast: the legacy context breaks "
                "the graph inside compiled code (the dtypes stay right, fullgraph=True raises)",
    apply=_legacy_context_unsupported,
    expect=("compile_regions scenario 'legacy_entry_point'", "compiled call raised Unsupported"),
    select="test_compile_region and legacy_entry_point",
))
register(Mutant(
    name="compile-cache-key-ignores-autocast-dtype",
    description="the AOTAutograd cache key ignores the autocast dtype: a function compiled "
                "afresh in a region of the other dtype is served the first region's artifact",
    apply=_aot_cache_key_without_dtype,
    expect=("compile_regions scenario 'recompiled_in_other_region'",
            "inside an other-dtype region", "do not match"),
    select="test_compile_region and recompiled_in_other_region and aot_eager",
    options=("--amp-compile", "aot_eager"),
))
register(Mutant(
    name="compile-region-leaks-on-raise",
    description="the region dynamo rebuilds after a graph break restores no state when "
                "the code in it raises",
    apply=_resumed_region_leaks,
    expect=("compile_regions scenario 'error_at_graph_break'",
            "autocast state not restored after the compiled region raised"),
    select="test_compile_region and error_at_graph_break",
))
register(Mutant(
    name="compile-break-runs-without-region",
    description="the eager code at a graph break inside a compiled region runs without the "
                "region (the ops traced before and after the break keep it)",
    apply=_break_runs_without_region,
    expect=("compile_regions scenario 'computing_break", "do not match"),
    select="test_compile_region and (computing_break or graph_break)",
))
register(Mutant(
    name="export-region-error-swallowed",
    description="torch.export of a module that raises inside an autocast region raises an "
                "unrelated error instead of the module's own",
    apply=_export_swallows_region_error,
    expect=("torch.export (non-strict) of a module raising in 'region'",
            "expected the module's own RegionError"),
    select="test_export_region_raises",
))
register(Mutant(
    name="export-strict-region-error-swallowed",
    description="the region dynamo traces, left by an exception, raises an unrelated error: "
                "strict torch.export of a module raising inside autocast loses its exception",
    apply=_strict_export_swallows_region_error,
    expect=("torch.export (strict) of a module raising in 'region'",
            "expected the module's own RegionError"),
    select="test_export_region_raises and strict and not non_strict",
))
register(Mutant(
    name="compile-stale-guard",
    description="dynamo installs no guard on the global autocast state: a graph compiled "
                "in one region is reused in a region of another dtype",
    apply=_guard_ignores_global_state,
    expect=("compile_regions scenario 'ambient_changes'", "inside an other-dtype region"),
    select="test_compile_region and ambient_changes",
))
register(Mutant(
    name="compile-backend-drops-regions",
    description="the aot_eager backend drops the autocast region nodes of the graph it "
                "compiles: the compiled op runs in float32",
    apply=_backend_drops_regions,
    expect=("compiled_policy: torch.mm", "compiled output dtypes"),
    select="test_compiled_policy and torch_16-mm",
    options=("--amp-compile", "aot_eager"),
))
register(Mutant(
    name="export-non-strict-drops-regions",
    description="non-strict torch.export traces through the module's autocast regions "
                "without entering them: its program runs their ops outside the regions "
                "(strict export keeps them)",
    apply=_non_strict_export_drops_regions,
    expect=("through torch.export (non-strict)", "the exported program vs eager"),
    select="test_export_region and non_strict",
))
