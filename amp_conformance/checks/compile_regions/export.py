"""torch.export keeps autocast regions, and the exported program runs them as eager does.

A small module with an amp region, a nested ``enabled=False`` region and (where the device
has one) a nested region of the other amp dtype is exported with ``torch.export.export``.
The exported graph must still hold every region: torch 2.13 wraps each in a
``torch.ops.higher_order.wrap_with_autocast(device, dtype, enabled, cache_enabled, submod,
*args)`` node (nested regions in the submodule); older exports keep flat
``_enter_autocast(device, dtype, enabled, cache_enabled)`` nodes, which count the same.
Running the exported program, and its decomposition to core ATen (where the regions become
explicit casts), must give eager's outputs: the same dtypes, bitwise equal values.
"""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target

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
