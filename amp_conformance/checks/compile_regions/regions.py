"""Autocast region semantics under torch.compile, as a table of scenarios.

Dynamo traces ``with torch.autocast(...)`` into the graph (``_enter_autocast`` /
``_exit_autocast`` nodes, lowered by AOTAutograd and the backend) and guards the graph on
the ambient autocast state. A scenario is a function with autocast regions (or none, called
inside one), the ambient states it is called in one after another, and what it exercises.
The check runs it eagerly and compiled in each ambient state in turn and requires, call by
call: the same outputs (dtype and value: bitwise for eager/aot_eager), the same autocast
state observed inside (the body returns it), the same exception where eager raises, and
the autocast state before the call restored exactly after it. Calling again in another
ambient state catches a stale graph whose guards missed the change.

Adding a scenario is one row of :data:`SCENARIOS`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks import compiling as backends
from amp_conformance.checks import fake_casts
from amp_conformance.checks.compile_regions import bodies, caches
from amp_conformance.checks.compile_regions.bodies import Body, Env
from amp_conformance.core import devices
from amp_conformance.core.casting import map_tensors
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema.defects import KNOWN_DEFECT
from amp_conformance.schema.defects import registry as defect_registry


@dataclass(frozen=True)
class Ambient:
    """The autocast state a call is made in, set up outside the compiled function: a region
    (``region``) of the amp dtype (``dtype="amp"``), the other one (``"other"``) or the
    current one (None), possibly disabled; or no region, only the device's autocast dtype
    set (``default``); or nothing at all."""

    name: str
    region: bool = False
    dtype: str | None = None
    enabled: bool = True
    default: str | None = None

    @contextlib.contextmanager
    def enter(self, env: Env) -> Iterator[None]:
        if self.region:
            with env.target.autocast(env.dtype_of(self.dtype), enabled=self.enabled):
                yield
        elif self.default is not None:
            previous = torch.get_autocast_dtype(env.device)
            torch.set_autocast_dtype(env.device, env.dtype_of(self.default))
            try:
                yield
            finally:
                torch.set_autocast_dtype(env.device, previous)
        else:
            yield


NO_REGION = Ambient("outside any region")
AMP = Ambient("inside an amp-dtype region", True, "amp")
OTHER = Ambient("inside an other-dtype region", True, "other")
DISABLED = Ambient("inside an enabled=False region of the amp dtype", True, "amp", enabled=False)
DISABLED_SAME = Ambient("inside an enabled=False region of the current dtype", True,
                        enabled=False)
DEFAULT_AMP = Ambient("outside any region, autocast dtype set to the amp dtype", default="amp")
DEFAULT_OTHER = Ambient("outside any region, autocast dtype set to the other dtype",
                        default="other")


#: how a scenario's ``known`` names a torch.export mode (``export-strict``, ``export-non_strict``)
EXPORT = "export-"


@dataclass(frozen=True)
class Scenario:
    """One row of the table.

    - ``build(env)`` returns the function compiled (one tensor in; tensors and observed
      state out).
    - ``calls``: the ambient states it is called in, in order (eager, then compiled, each).
    - ``raises``: the exception eager raises (the compiled call must raise it too).
    - ``needs``: ``"inner"`` (torch.autocast inside compiled code: not under --fake, where
      torch.autocast refuses the absent device), ``"other"`` (a second amp dtype),
      ``"legacy"`` (a torch.<device>.amp.autocast entry point).
    - ``graphs``: bounds on the graphs dynamo compiles over all the calls; fewer than the
      lower bound means it fell back to eager and nothing compiled was checked.
    - ``known``: (backend, ``"*"`` for every backend, or ``"export-<mode>"``, the id of a
      defect of ``oplists/defects.toml``) for each upstream defect this scenario shows;
      before the defect's ``fixed`` release the item is a strict xfail, so a fix is noticed.
    - ``backends``: the backends it runs with, where not every one.
    - ``recompile``: each call compiles the function afresh (dynamo reset in between) with
      PyTorch's compile caches on, in a folder of the check's own: what one compile left
      there must not serve a region it was not made for (:func:`aot_cache`).
    - ``fullgraph``: compiled with ``fullgraph=True``, so a graph break is an error, not a
      silent fall back to eager around it (the dtypes are right either way); False for the
      functions that break the graph on purpose.
    """

    name: str
    build: Callable[[Env], Body]
    exercises: str
    calls: tuple[Ambient, ...] = (NO_REGION,)
    raises: type[BaseException] | None = None
    needs: frozenset[str] = frozenset({"inner"})
    graphs: tuple[int, int] = (1, 1)
    known: tuple[tuple[str, str], ...] = ()
    recompile: bool = False
    fullgraph: bool = True
    #: the backends it runs with (all where empty): a scenario of dynamo's own bytecode
    #: handling (graph breaks) gains nothing from a second backend
    backends: tuple[str, ...] = ()
    #: why torch.export cannot take it in a mode (``"strict"``, ``"non_strict"``), where it
    #: cannot: strict export is dynamo with ``fullgraph=True``, so a scenario that breaks the
    #: graph on purpose is exported non-strict only
    unexportable: tuple[tuple[str, str], ...] = ()

    def export_refusal(self, mode: str) -> str | None:
        """Why the scenario is not exported in ``mode``, or None."""
        if mode == "strict" and not self.fullgraph:
            return ("not applicable: strict torch.export traces one whole graph with dynamo "
                    "and this scenario breaks the graph on purpose (torch.compile's graph "
                    "breaks); it is exported non-strict")
        return dict(self.unexportable).get(mode)

    def known_defect(self, backend: str, version: str | None = None) -> str | None:
        """Why this scenario fails with ``backend`` on the running torch (or ``version``):
        the known upstream defect it shows there, or None."""
        for known_backend, defect_id in self.known:
            defect = defect_registry()[defect_id]
            every = known_backend == "*" and not backend.startswith(EXPORT)
            if (known_backend == backend or every) and defect.applies(version):
                return f"{KNOWN_DEFECT}{defect.cite()}: {defect.summary}"
        return None


# -- the table ------------------------------------------------------------------------

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("inner_region", bodies.inner, "torch.autocast(device, dtype) inside compiled code: "
             "the traced region's dtype and enabled flag"),
    Scenario("inner_region_no_cache", bodies.inner_no_cache, "cache_enabled=False traced into the "
             "region"),
    Scenario("inner_region_default_dtype", bodies.inner_default_dtype, "torch.autocast(device) "
             "without dtype inside compiled code follows torch.set_autocast_dtype",
             calls=(DEFAULT_AMP, DEFAULT_OTHER), needs=frozenset({"inner", "other"}),
             graphs=(1, 2), known=(("*", "compile-stale-dtype-while-disabled"),)),
    Scenario("outer_region", bodies.plain, "a compiled function called inside a region",
             calls=(AMP,), needs=frozenset()),
    Scenario("ambient_changes", bodies.plain, "the same compiled function re-called as the ambient "
             "state changes: guards must see every change", calls=(
                 NO_REGION, AMP, OTHER, DISABLED_SAME, AMP, NO_REGION),
             needs=frozenset({"other"}), graphs=(3, 4),
             known=(("*", "compile-stale-ambient-dtype"),)),
    Scenario("recompiled_in_other_region", bodies.plain, "the same function compiled afresh inside "
             "a region of the other dtype, PyTorch's compile caches on (the AOTAutograd "
             "cache reached): a cached artifact serves only the region it was made for",
             calls=(AMP, OTHER), needs=frozenset({"other"}), graphs=(2, 2), recompile=True,
             known=(("inductor", "compile-cache-key-ignores-autocast-dtype"),
                    ("aot_eager", "compile-cache-key-ignores-autocast-dtype"))),
    Scenario("dtype_change_while_disabled", bodies.plain, "re-called after torch.set_autocast_dtype "
             "while autocast is off: code reading the autocast dtype must see the change",
             calls=(DEFAULT_AMP, DEFAULT_OTHER), needs=frozenset({"other"}), graphs=(1, 2),
             known=(("*", "compile-stale-dtype-while-disabled"),)),
    Scenario("inner_region_under_ambient", bodies.inner, "the compiled region wins over the "
             "ambient state it is called in", calls=(NO_REGION, OTHER, DISABLED),
             needs=frozenset({"inner", "other"}), graphs=(1, 3)),
    Scenario("disabled_region_under_ambient", bodies.disabled_inner, "an enabled=False region "
             "inside compiled code called inside a region", calls=(AMP,)),
    Scenario("decorator", bodies.decorated, "a function decorated with torch.autocast, compiled"),
    Scenario("disabled_subregion", bodies.disabled_subregion, "a nested enabled=False region "
             "restores the outer region inside the graph"),
    Scenario("other_dtype_subregion", bodies.other_subregion, "a nested region of the other amp "
             "dtype restores the outer dtype inside the graph",
             needs=frozenset({"inner", "other"})),
    Scenario("call_forms", bodies.every_call_form, "torch.autocast and torch.<device>.amp.autocast "
             "called positionally, by keyword and mixed inside compiled code, as a context "
             "manager and as a decorator, enabled with the cache off and disabled with it "
             "on"),
    Scenario("decorated_calls", bodies.decorated_calls, "functions, methods, a module's "
             "forward and a callable object decorated with torch.autocast (and the legacy "
             "entry point) outside compiled code, called inside it, two of them inside a "
             "region traced there", graphs=(1, 1)),
    Scenario("legacy_entry_point", bodies.legacy, "torch.<device>.amp.autocast inside compiled "
             "code", needs=frozenset({"inner", "legacy"})),
    Scenario("graph_break", bodies.graph_break, "a graph break inside a region: the resumed code "
             "runs in the region, the code after it outside", graphs=(2, 3), fullgraph=False),
    Scenario("computing_break", bodies.computing_break("skipped_call", "enabled"), "a graph "
             "break that computes (a call dynamo skips) inside a region: the ops before, at "
             "and after it run in the region", graphs=(2, 8), backends=("eager",),
             fullgraph=False),
    Scenario("computing_break_nested", bodies.computing_break("item_branch", "nested"), "a "
             "graph break that computes (.item() and a branch on it) inside a region of the "
             "other dtype nested in one", needs=frozenset({"inner", "other"}), graphs=(2, 8),
             backends=("eager",), fullgraph=False, unexportable=(("non_strict", (
                 "not applicable: the scenario branches on a tensor's value (.item()), which "
                 "torch.export traces in neither mode (a data-dependent guard)")),)),
    Scenario("computing_break_disabled", bodies.computing_break("tolist", "disabled"), "a "
             "graph break that computes (values read back to Python) inside an enabled=False "
             "region nested in one", graphs=(2, 8), backends=("eager",), fullgraph=False,
             known=(("export-non_strict", "export-non-strict-loses-tolist-error"),)),
    Scenario("computing_break_decorator", bodies.computing_break("skipped_call", "decorator"),
             "a graph break that computes inside a function decorated with torch.autocast",
             graphs=(2, 8), backends=("eager",), fullgraph=False),
    Scenario("error_at_graph_break", bodies.error_at_graph_break, "an exception raised by eager "
             "code at a graph break inside a region", raises=KeyError, fullgraph=False,
             known=(("export-non_strict", "export-non-strict-swallows-exception"),)),
    Scenario("kernel_error", bodies.kernel_error, "an exception raised by a kernel inside a traced "
             "region", raises=bodies.KernelError,
             known=(("eager", "compile-region-leaks-on-raise"),)),
)


def by_name(name: str) -> Scenario:
    (found,) = [s for s in SCENARIOS if s.name == name]
    return found


def other_dtype(target: Target, dtype: torch.dtype) -> torch.dtype | None:
    others = [d for d in devices.supported_amp_dtypes(target.device, target.fake) if d != dtype]
    return others[0] if others else None


def not_applicable(scenario: Scenario, target: Target, dtype: torch.dtype, backend: str,
                   tier: str | None = None) -> str | None:
    """Why the scenario does not apply here, or None (``tier``: the ``--amp-compile``
    backend; None in the default run)."""
    if scenario.recompile and caches.unreached(backend, tier):
        return caches.unreached(backend, tier)
    if scenario.backends and backend not in scenario.backends:
        return (f"not applicable: the scenario checks how dynamo resumes at a graph break, the "
                f"same for every backend; it runs with {', '.join(scenario.backends)}")
    if target.fake and "inner" in scenario.needs:
        return (f"not applicable in --fake mode: torch.autocast({target.device!r}) refuses the "
                "absent device (it warns and disables itself), so no region is traced inside "
                "compiled code; the scenarios whose region is entered around the call run")
    if target.fake and backends.generates_code(backend):
        return f"not applicable in --fake mode: backend {backend} generates code for the device"
    if "other" in scenario.needs and other_dtype(target, dtype) is None:
        return f"not applicable: {target.device} supports only {dtype}, no other amp dtype"
    if "legacy" in scenario.needs and devices.legacy_autocast(target.device) is None:
        return f"not applicable: {target.device} has no legacy torch.{target.device}.amp.autocast"
    return None


# -- the check ------------------------------------------------------------------------


@dataclass
class _Call:
    """What one call did: its output or exception, and how it changed the autocast state."""

    output: Any = None
    error: BaseException | None = None
    leaked: tuple[str, ...] = ()


def _call(fn: Body, x: torch.Tensor, ambient: Ambient, env: Env) -> _Call:
    with ambient.enter(env), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the legacy entry point's deprecation
        before = AutocastState.capture(env.device)
        result = _Call()
        try:
            result.output = fn(x)
        except Exception as exc:  # compared with what eager raised
            result.error = exc
        result.leaked = tuple(before.diff(AutocastState.capture(env.device)))
        before.restore()  # a leak must not spill into the next call
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _shapes(value: Any) -> Any:
    """Fake tensors carry no values: compare dtypes and shapes (and every non-tensor)."""
    return map_tensors(lambda t: ("tensor", t.dtype, tuple(t.shape)), value)


def _compare_call(eager: _Call, compiled: _Call, scenario: Scenario, numerics: str,
                  target: Target, backend: str = "eager", what: str = "compiled") -> list[str]:
    """What the compiled call did differently from eager, as lines of a failure. Generated
    code may raise its own error where eager raises (inductor's bounds check raises
    RuntimeError for eager's IndexError): then only that it raised is required."""
    same_error_type = not backends.generates_code(backend)
    if eager.error is not None or scenario.raises is not None:
        expected = type(eager.error).__name__ if eager.error is not None else "nothing"
        if scenario.raises is not None and not isinstance(eager.error, scenario.raises):
            return [f"eager raised {expected}, the scenario expects {scenario.raises.__name__}"]
        problems = []
        if compiled.error is None or (same_error_type
                                      and type(compiled.error) is not type(eager.error)):
            got = "nothing" if compiled.error is None else _first_line(compiled.error)
            problems.append(f"{what} raised {got}, eager raised {expected}")
        if compiled.leaked:
            problems.append(f"autocast state not restored after the {what} region raised: "
                            + "; ".join(compiled.leaked))
        return problems
    if compiled.error is not None:
        limit = fake_casts.not_applicable(compiled.error) if target.fake else None
        if limit is not None:
            raise limit
        return [f"{what} call raised {_first_line(compiled.error)}"]
    problems = []
    try:
        if target.has_values:
            backends.compare_outputs(compiled.output, eager.output, backend, numerics, None,
                                     f"{what} vs eager")
        else:
            compare(_shapes(compiled.output), _shapes(eager.output), "bitwise", None,
                    f"{what} vs eager (dtypes and shapes)")
    except ConformanceFailure as exc:
        problems.append(f"{exc} (outputs: the tensors, then (enabled, dtype, cache_enabled) "
                        "observed inside)")
    if compiled.leaked:
        problems.append(f"autocast state changed by the {what} call: "
                        + "; ".join(compiled.leaked))
    return problems


def _input(target: Target) -> torch.Tensor:
    if target.fake:  # a fake tensor of the device, made inside FakeTensorMode
        return torch.randn(8, 8, device=target.device)
    return torch.randn(8, 8, generator=torch.Generator().manual_seed(0)).to(target.device)


def check(scenario: Scenario, target: Target, dtype: torch.dtype, backend: str,
          numerics: str = "bitwise") -> None:
    """Run the scenario eagerly and compiled, call by call; ConformanceFailure on the first
    call that differs, or when dynamo compiled more or fewer graphs than it should."""
    env = Env(target, dtype, other_dtype(target, dtype))
    where = (f"compile_regions scenario {scenario.name!r} ({scenario.exercises}), backend "
             f"{backend}, device {target}, amp dtype {dtype}")
    numerics = backends.numerics_for(backend, numerics)
    blocked = backends.compiles_nothing()  # under fullgraph, dynamo's skip would raise
    if blocked:
        raise NotApplicable(blocked)
    with target.tensors():
        x = _input(target)
        body = scenario.build(env)
        with backends.compiling(caches=scenario.recompile) as stats, \
                caches.reached(backend) if scenario.recompile else contextlib.nullcontext():
            compiled = torch.compile(body, backend=backend, dynamic=False,
                                     fullgraph=scenario.fullgraph)
            for i, ambient in enumerate(scenario.calls, 1):
                if scenario.recompile and i > 1:  # a fresh compile; the caches stay
                    torch._dynamo.reset()
                    compiled = torch.compile(body, backend=backend, dynamic=False,
                                             fullgraph=scenario.fullgraph)
                eager = _call(body, x, ambient, env)
                problems = _compare_call(eager, _call(compiled, x, ambient, env), scenario,
                                         numerics, target, backend)
                if problems:
                    lines = "\n".join(f"  {p}" for p in problems)
                    raise ConformanceFailure(f"{where}:\n  call {i} of {len(scenario.calls)}, "
                                             f"{ambient.name}:\n{lines}")
            if scenario.recompile and caches.lookups() < len(scenario.calls):
                raise NotApplicable(
                    f"not applicable: backend {backend} looked the AOTAutograd cache up "
                    f"{caches.lookups()} time(s) in {len(scenario.calls)} fresh compiles: no "
                    "artifact of it was served or refused")
            low, high = scenario.graphs
            blocked = backends.compiles_nothing() if stats.graphs == 0 else None
            if blocked:
                raise NotApplicable(blocked)
            if not low <= stats.graphs <= high:
                raise ConformanceFailure(
                    f"{where}: dynamo compiled {stats.graphs} graph(s) over "
                    f"{len(scenario.calls)} call(s), expected {low} to {high}"
                    + (" (0: it fell back to eager, nothing compiled was checked)"
                       if stats.graphs == 0 else " (a guard that fails on every call "
                       "recompiles; one that never fails reuses a stale graph)"))
