"""Autocast state is per thread: a thread starts with autocast off, the cast cache is
cleared for every thread, backward threads see the caller's autocast state."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("threads", "autocast state is per thread, the cast cache is cleared for every thread, "
          "backward threads see the caller's autocast state"),
)
