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
from typing import Any

import torch

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
