"""Autocast regions under ``torch.compile`` and ``torch.export``: a table of scenarios
(``regions``: inside, around, nested, decorator, decorated functions and methods called
inside compiled code, legacy, every call form, graph break, exception, ambient changes, a
fresh compile in another region reaching the AOTAutograd cache), each run eagerly and
compiled call by call (with ``fullgraph=True`` where the function does not break the graph
on purpose), and ``export``: the scenarios exported strict and non-strict, their programs
and core-ATen decompositions run as eager does."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("compile_regions", "autocast regions traced by torch.compile (inside, around, "
          "nested, decorator, decorated functions and methods called inside, legacy, every "
          "call form, graph break, a break that computes, exception, ambient changes, a fresh "
          "compile in another region) give eager's dtypes, values and state, compiled with "
          "fullgraph=True unless they break the graph on purpose; exported strict and "
          "non-strict, the program and its core-ATen decomposition do too; an exception "
          "raised in an exported region reaches the caller unchanged",
          capability="compile"),
)

from amp_conformance.checks.compile_regions.collect import (  # noqa: E402
    EXPORT_FIXTURES,
    FIXTURES,
    export_params,
    params,
)

PARAMS = {FIXTURES: params, EXPORT_FIXTURES: export_params}
