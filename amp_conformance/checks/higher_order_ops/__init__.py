"""Higher-order ops under autocast: every HOP a user reaches, against the same computation
without it, eagerly and compiled.

Ops built from subgraphs (``torch.cond``, ``while_loop``, ``scan``, ``map``,
``associative_scan``, ``flex_attention``, activation checkpointing and
``nested_compile_region`` under torch.compile, ``wrap``) each carry dispatch rules of their
own, autocast's included, in eager and under torch.compile. Each is called inside the
device's autocast on subgraphs with regions of their own (``enabled=False``, the other amp
dtype) and held to the computation written without it: the same dtypes and values, the
regions inside kept, the state restored.

- ``hops``: the scenarios (one per HOP, through the API a user calls) and the HOPs no user
  calls, each with why;
- ``check``: one HOP, uncompiled or through one backend; the coverage of every HOP the
  running torch registers.
"""

from typing import Any

import pytest

from amp_conformance.core.registry import Check

CHECKS = (
    Check("higher_order_ops", "every higher-order op a user reaches (cond, while_loop, scan, "
          "map, associative_scan, flex_attention, checkpoint and nested_compile_region under "
          "torch.compile, wrap), with autocast regions inside its subgraphs, gives the dtypes "
          "and values of the same computation without it, uncompiled and compiled; every HOP "
          "of the running torch is run or declared internal", capability="compile"),
)

FIXTURES = ("hop_backend", "hop")


def params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (backend, HOP): uncompiled first, then each backend; a known PyTorch
    defect is an xfail (strict on a real device)."""
    from amp_conformance.checks.higher_order_ops import check
    from amp_conformance.checks.higher_order_ops.hops import HOPS
    from amp_conformance.core.errors import ConformanceFailure

    found = []
    for backend in check.backends(settings.compile_backend):
        for hop in HOPS:
            known = hop.known_defect(backend, settings.fake)
            # strict on a real device, where a fix must be noticed; a fake device's regions
            # are switched state, which an old release's defect may keep on some devices
            marks = [pytest.mark.xfail(strict=not settings.fake, raises=ConformanceFailure,
                                       reason=known)] if known else []
            found.append(pytest.param(backend, hop, id=f"{backend}-{hop.name}", marks=marks))
    return found


PARAMS = {FIXTURES: params}
