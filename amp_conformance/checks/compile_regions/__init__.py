"""Autocast regions under ``torch.compile`` and ``torch.export``: a table of scenarios
(``regions``: inside, around, nested, decorator, decorated functions and methods called
inside compiled code, legacy, every call form, graph break, exception, ambient changes, a
fresh compile in another region reaching the AOTAutograd cache), each run eagerly and
compiled call by call (with ``fullgraph=True`` where the function does not break the graph
on purpose), and ``export``: regions kept by torch.export run as eager does."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("compile_regions", "autocast regions traced by torch.compile (inside, around, "
          "nested, decorator, decorated functions and methods called inside, legacy, every "
          "call form, graph break, a break that computes, exception, ambient changes, a fresh "
          "compile in another region) and kept by torch.export give eager's dtypes, values "
          "and state, compiled with fullgraph=True unless they break the graph on purpose; an "
          "exception raised in an exported region reaches the caller unchanged",
          capability="compile"),
)

from amp_conformance.checks.compile_regions.collect import FIXTURES, params  # noqa: E402

PARAMS = {FIXTURES: params}
