"""The cast cache with grad modes: ``inference_mode``, no_grad passes inside autocast
(pytorch#158232), mixed grad contexts, ``retain_graph``, many no_grad iterations."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("cache_interactions", "the cast cache with inference_mode, no_grad/grad passes, "
          "retain_graph and many no_grad iterations"),
)
