"""torch.export keeps autocast regions, and the exported program runs them as eager does.

A small module with an amp region, a nested ``enabled=False`` region and (where the device
has one) a nested region of the other amp dtype is exported with ``torch.export.export``.
The exported graph must still hold every region: torch 2.13 wraps each in a
``torch.ops.higher_order.wrap_with_autocast(device, dtype, enabled, cache_enabled, submod,
*args)`` node (nested regions in the submodule); older exports keep flat
``_enter_autocast(device, dtype, enabled, cache_enabled)`` nodes, which count the same.
Running the exported program, and its decomposition to core ATen (where the regions become
explicit casts), must give eager's outputs: the same dtypes, bitwise equal values.

A module whose forward raises inside a region (the region itself, an ``enabled=False``
region in it, a region of the other dtype in it) is exported too, strict and non-strict:
the export must raise the module's own exception, unchanged, and leave the autocast state
as it found it. Strict export (dynamo) raises ``Unsupported: Observed exception`` instead,
naming the module's exception (its class and message) only in its text: a recorded
reference defect
(``export-strict-observed-exception``), accepted while it holds, and only when the text
names the module's exception (an unrelated error still fails).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import torch

from amp_conformance.checks.compile_regions import regions
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.state import AutocastState, unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.versions import release

Region = tuple[str, Any, bool]  # (device, dtype or "any" when disabled, enabled)


class Regions(torch.nn.Module):
    """An amp region holding a disabled and (optionally) an other-dtype subregion."""

    def __init__(self, device: str, dtype: torch.dtype, other: torch.dtype | None):
        super().__init__()
        self.device, self.dtype, self.other = device, dtype, other

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.autocast(self.device, dtype=self.dtype):
            inside = torch.mm(x, x)
            with torch.autocast(self.device, enabled=False):
                disabled = torch.mm(x, x)
            nested = inside
            if self.other is not None:
                with torch.autocast(self.device, dtype=self.other):
                    nested = torch.mm(x, x)
            after_subregions = torch.mm(x, x)
        return inside, disabled, nested, after_subregions, torch.mm(x, x)

    def expected_regions(self) -> list[Region]:
        found = [(self.device, self.dtype, True), (self.device, "any", False)]
        if self.other is not None:
            found.append((self.device, self.other, True))
        return sorted(found, key=repr)


def _region_of(node: torch.fx.Node) -> Region | None:
    wrap = getattr(torch.ops.higher_order, "wrap_with_autocast", None)
    enter = getattr(torch.amp.autocast_mode, "_enter_autocast", None)
    if node.op != "call_function" or node.target not in (wrap, enter):
        return None
    device, dtype, enabled = node.args[0], node.args[1], bool(node.args[2])
    return (device, dtype if enabled else "any", enabled)


def regions_in(gm: torch.fx.GraphModule) -> list[Region]:
    """Every autocast region of an exported graph, nested submodules included."""
    found = [r for module in gm.modules() if isinstance(module, torch.fx.GraphModule)
             for r in map(_region_of, module.graph.nodes) if r is not None]
    return sorted(found, key=repr)


def check_export(target: Target, dtype: torch.dtype, other: torch.dtype | None) -> None:
    """Export the module, find its regions in the graph, run it and its decomposition."""
    where = f"compile_regions: torch.export of autocast regions on {target}, amp dtype {dtype}"
    module = Regions(target.device, dtype, other)
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0)).to(target.device)
    with unchanged_autocast_state(target.device, where):
        expected = module(x)
        try:
            program = torch.export.export(module, (x,))
        except Exception as exc:
            raise ConformanceFailure(f"{where}: export failed: {type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        found = regions_in(program.graph_module)
        if found != module.expected_regions():
            raise ConformanceFailure(
                f"{where}: the exported graph holds the regions (device, dtype, enabled) "
                f"{found}, expected {module.expected_regions()}:\n{program.graph_module.code}")
        for name, runnable in (("the exported program", program),
                               ("the exported program decomposed to core ATen",
                                program.run_decompositions())):
            got = runnable.module()(x)
            try:
                compare(tuple(got), expected, "bitwise", None, f"{where}: {name} vs eager")
            except ConformanceFailure as exc:
                raise ConformanceFailure(f"{exc}\n  outputs: inside the region, in the "
                                         "enabled=False subregion, in the other-dtype "
                                         "subregion, after the subregions, outside") from None


class RegionError(ValueError):
    """What the module's forward raises inside a region: the user's own exception."""


#: where the forward raises: in the region, in an enabled=False region in it, in a region
#: of the other amp dtype in it
RAISING_FORMS = ("region", "disabled", "nested")
STRICT_DEFECT = "export-strict-observed-exception"
NON_STRICT_DEFECT = "export-non-strict-swallows-exception"
#: the reference defect each mode of export may show with a raising region (by ``strict``)
DEFECTS = {True: STRICT_DEFECT, False: NON_STRICT_DEFECT}


class RaisingRegions(torch.nn.Module):
    """Raises :class:`RegionError` inside an amp region, at the depth ``form`` says."""

    def __init__(self, device: str, dtype: torch.dtype, other: torch.dtype | None, form: str):
        super().__init__()
        self.device, self.dtype, self.other, self.form = device, dtype, other, form

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device, dtype=self.dtype):
            y = torch.mm(x, x)
            if self.form == "disabled":
                with torch.autocast(self.device, enabled=False):
                    raise RegionError(f"raised by the module in an enabled=False region, {y.dtype}")
            if self.form == "nested":
                with torch.autocast(self.device, dtype=self.other):
                    raise RegionError(f"raised by the module in a nested region, {y.dtype}")
            raise RegionError(f"raised by the module in its region, {y.dtype}")


def _raised(module: torch.nn.Module, call: Any) -> BaseException | None:
    try:
        call(module)
    except Exception as exc:  # noqa: BLE001 - what it raised is the verdict
        return exc
    return None


def _names(got: BaseException | None, eager: BaseException | None) -> bool:
    """Whether dynamo's text names the module's exception: its class, and its message
    where dynamo's text carries one (2.9 on; 2.8 names the class alone)."""
    text = str(got) if got is not None else ""
    return eager is not None and re.search(rf"\b{type(eager).__name__}\b", text) is not None \
        and (str(eager) in text or release() < "2.9")


def _known(strict: bool, got: BaseException | None, eager: BaseException | None) -> bool:
    """Whether ``got`` is the mode's reference defect, on a torch that still has it: strict,
    dynamo's "Observed exception" naming the module's; non-strict, nothing raised."""
    if not defect_registry()[DEFECTS[strict]].applies():
        return False
    return _names(got, eager) if strict else got is None


def check_export_raises(target: Target, dtype: torch.dtype, other: torch.dtype | None,
                        strict: bool) -> bool:
    """Export each raising module; whether the export reproduced its mode's known defect
    (:data:`DEFECTS`)."""
    mode = "strict" if strict else "non-strict"
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(0)).to(target.device)
    known = False
    for form in RAISING_FORMS if other is not None else RAISING_FORMS[:2]:
        where = (f"compile_regions: torch.export ({mode}) of a module raising in "
                 f"{form!r} on {target}, amp dtype {dtype}")
        module = RaisingRegions(target.device, dtype, other, form)
        eager = _raised(module, lambda m: m(x))
        before = AutocastState.capture(target.device)
        got = _raised(module, lambda m: torch.export.export(m, (x,), strict=strict))
        changed = before.diff(AutocastState.capture(target.device))
        if changed:
            before.restore()
            raise ConformanceFailure(f"{where}: autocast state not restored after the export "
                                     f"raised: {'; '.join(changed)}")
        if type(got) is type(eager) and str(got) == str(eager):
            continue
        if _known(strict, got, eager):
            known = True
            continue
        said = describe_error(got) if got is not None else "nothing"
        raise ConformanceFailure(f"{where}: the export raised {said}, expected the module's "
                                 f"own {describe_error(eager)}")
    return known


# -- every region scenario, exported -------------------------------------------------------

#: the modes of torch.export, by item id
MODES = {"non_strict": False, "strict": True}
#: the scenarios the default run exports (a region in the module, a region nested in it, a
#: region inside the one the program is called in); the compiled tier exports every one
DEFAULT_SCENARIOS = ("inner_region", "other_dtype_subregion", "disabled_region_under_ambient")
CACHE_DEFECT = "export-non-strict-traces-cache-off"
DECOMPOSITION_DEFECT = "export-decomposition-drops-regions"


def _encode(value: Any) -> Any:
    """A scenario's output as export returns it: tensors only (an observed flag as a bool
    tensor, an observed dtype as an empty tensor of it)."""
    if isinstance(value, torch.dtype):
        return torch.empty(0, dtype=value)
    if isinstance(value, bool):
        return torch.tensor(value)
    return value


class Scenario(torch.nn.Module):
    """A region scenario's body as a module export takes."""

    def __init__(self, body: Any):
        super().__init__()
        self.body = body

    def forward(self, x: torch.Tensor) -> Any:
        return torch.utils._pytree.tree_map(_encode, self.body(x))


def _cache_off(module: torch.nn.Module) -> Any:
    """``module`` called with autocast's cast cache off, as non-strict export traces it."""
    def call(x: torch.Tensor) -> Any:
        previous = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(False)
        try:
            return module(x)
        finally:
            torch.set_autocast_cache_enabled(previous)
    return call


def _export(module: torch.nn.Module, x: torch.Tensor, strict: bool) -> tuple[Any, Any]:
    """The exported program and its core-ATen decomposition, both made in the caller's
    autocast state (as one user step)."""
    program = torch.export.export(module, (x,), strict=strict)
    return program, program.run_decompositions()


def not_applicable(scenario: regions.Scenario, target: Target, dtype: torch.dtype,
                   mode: str) -> str | None:
    """Why the scenario is not exported in ``mode`` here, or None: its own refusal, or what
    it needs of the device (an export is always fresh: no compile cache, no backend)."""
    return scenario.export_refusal(mode) or regions.not_applicable(
        replace(scenario, recompile=False, backends=()), target, dtype, "eager")


def check_scenario_export(scenario: regions.Scenario, target: Target, dtype: torch.dtype,
                          mode: str, numerics: str = "bitwise") -> list[str]:
    """Export the scenario in each of its ambient states (``mode``: a key of :data:`MODES`),
    run the program and its core-ATen decomposition in that state: eager's outputs, observed
    state and exceptions, the state restored. Returns the reference defects reproduced
    (:data:`CACHE_DEFECT`, :data:`DECOMPOSITION_DEFECT`), each shown on the call itself:
    non-strict export traced the regions with the cast cache off (the program does what
    eager does with the cache off); the decomposition dropped the regions (the exported
    program held them and ran as eager, the decomposition holds none, and the call is made
    inside an enabled region, the one thing that can cast their ops again)."""
    env = regions.Env(target, dtype, regions.other_dtype(target, dtype))
    where = (f"compile_regions scenario {scenario.name!r} ({scenario.exercises}) through "
             f"torch.export ({mode.replace('_', '-')}), device {target}, amp dtype {dtype}")
    x = regions._input(target)
    registry = defect_registry()
    traces_cache_off = mode == "non_strict" and registry[CACHE_DEFECT].applies()
    drops_regions = registry[DECOMPOSITION_DEFECT].applies()
    reproduced: list[str] = []
    calls = tuple(dict.fromkeys(scenario.calls))  # each export is fresh: no guard to revisit
    for i, ambient in enumerate(calls, 1):
        module = Scenario(scenario.build(env))
        eager = regions._call(module, x, ambient, env)
        exported = regions._call(lambda t, m=module: _export(m, t, MODES[mode]), x, ambient, env)
        problems = []
        if exported.leaked:
            problems.append("autocast state changed by the export: " + "; ".join(exported.leaked))
        elif exported.error is not None:
            if eager.error is None or type(exported.error) is not type(eager.error):
                problems.append(f"the export raised {regions._first_line(exported.error)}, "
                                f"eager {'raised ' + type(eager.error).__name__ if eager.error else 'ran'}")
        else:
            program, decomposed = exported.output
            off = regions._call(_cache_off(module), x, ambient, env) if traces_cache_off else None
            if off is not None and not regions._compare_call(eager, off, scenario, numerics,
                                                             target):
                off = None  # the cache flag changes nothing this call observes
            held = True
            for name, runnable in (("the exported program", program),
                                   ("its core-ATen decomposition", decomposed)):
                got = regions._call(runnable.module(), x, ambient, env)
                found = regions._compare_call(eager, got, scenario, numerics, target, what=name)
                if not found:
                    continue
                shown = []
                if off is not None and not regions._compare_call(off, got, scenario, numerics,
                                                                 target, what=name):
                    shown = [CACHE_DEFECT]
                elif (runnable is decomposed and held and drops_regions and ambient.region
                      and ambient.enabled and regions_in(program.graph_module)
                      and not regions_in(decomposed.graph_module)):
                    shown = [CACHE_DEFECT] * (off is not None) + [DECOMPOSITION_DEFECT]
                held = held and shown == [CACHE_DEFECT]
                reproduced += shown
                problems += [] if shown else found
        if problems:
            lines = "\n".join(f"  {p}" for p in problems)
            raise ConformanceFailure(f"{where}:\n  call {i} of {len(calls)}, "
                                     f"{ambient.name}:\n{lines}")
    return sorted(set(reproduced))
