"""The AOTAutograd cache, as the scenario that compiles a function afresh in a region of the
other dtype (``recompiled_in_other_region``) meets it.

The cache outlives a dynamo reset (on disk, shared by processes); its key must tell the
autocast dtype apart, or a compile inside a float16 region is served the artifact of a
bfloat16 one (pytorch#181564, fixed in 2.13). Which backends reach it, read from torch
2.13.0 and observed there: ``inductor`` always (its artifacts are serializable);
``aot_eager`` with ``torch._functorch.config.force_autograd_cache`` and
``bundled_autograd_cache`` on (its graphs are then saved and found by the same key, as
``torch.compile``'s precompile path does); ``eager`` never (no AOTAutograd). torch 2.9.0
has no ``force_autograd_cache``: there only inductor reaches it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

#: the switches of torch._functorch.config that route aot_eager through the cache
AOT_EAGER_SWITCHES = ("force_autograd_cache", "bundled_autograd_cache")


def _switches_exist() -> bool:
    import torch._functorch.config as config

    return all(hasattr(config, name) for name in AOT_EAGER_SWITCHES)


def unreached(backend: str, tier: str | None) -> str | None:
    """Why ``backend``'s compiles do not reach the AOTAutograd cache in this run, or None.
    ``tier``: the ``--amp-compile`` backend (None: the default run, which does not pay for
    the cache)."""
    if backend == "eager":
        return ("not applicable: backend eager reaches no compile cache (dynamo's graph runs "
                "as traced, without AOTAutograd); aot_eager and inductor carry the scenario "
                "in the compiled tier (--amp-compile BACKEND)")
    if backend == "aot_eager" and not _switches_exist():
        return ("not applicable: aot_eager reaches the AOTAutograd cache only with "
                f"torch._functorch.config.{' and '.join(AOT_EAGER_SWITCHES)}, which torch "
                f"{torch.__version__} lacks; --amp-compile inductor carries the scenario")
    if tier is None:
        return ("not applicable in the default run: the first compile that reaches the "
                "AOTAutograd cache in a process imports inductor's lowering and hashes torch's "
                "sources for its key, more than the default run may spend; the compiled tier "
                "(--amp-compile BACKEND) runs it with aot_eager and with its backend")
    return None


@contextlib.contextmanager
def reached(backend: str) -> Iterator[None]:
    """Inside: ``backend``'s compiles go through the AOTAutograd cache where they can
    (aot_eager's switches on; the cache itself is turned on by ``compiling(caches=True)``)."""
    if backend != "aot_eager" or not _switches_exist():
        yield
        return
    import torch._functorch.config as config

    with config.patch(**dict.fromkeys(AOT_EAGER_SWITCHES, True)):
        yield


def lookups() -> int:
    """The AOTAutograd cache's hits and misses since dynamo's counters were cleared (a
    bypass, a graph the cache refuses, is no lookup)."""
    from torch._dynamo.utils import counters

    found = counters["aot_autograd"]
    return int(found["autograd_cache_hit"] + found["autograd_cache_miss"])
