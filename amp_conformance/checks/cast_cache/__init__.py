"""The autocast cast cache: a float32 parameter is cast once per outermost region, and only
then (not with ``cache_enabled=False``, not a registered cached tensor, not a non-leaf)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("cast_cache", "a float32 parameter is cast once per outermost region, and only then",
          needs_values=True, capability="cast_cache"),
)
