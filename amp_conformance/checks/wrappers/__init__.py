"""Conformance of the autocast wrappers libraries ship (opt-in: ``--wrapper``): a library
declares its region factory, forward decorator or float32 island (``declare``) and is held
to its declaration and to autocast's contract (``region``, ``forward``, ``nesting``,
``island``), on its own device's state alone (``other_devices``)."""

from amp_conformance.checks.wrappers.declare import (
    DeclarationError,
    Float32Island,
    ForwardDecorator,
    RegionFactory,
    validate,
)
from amp_conformance.core.registry import Check

__all__ = ["CHECKS", "DeclarationError", "Float32Island", "ForwardDecorator", "RegionFactory",
           "validate"]

CHECKS = (
    Check("wrappers", "opt-in (--wrapper MODULE:NAME): a library's autocast region factory, "
          "forward decorator or float32 island keeps its declaration and autocast's contract",
          opt_in="--wrapper"),
)

from amp_conformance.checks.wrappers.tier import PARAMS, TIER  # noqa: E402,F401
