"""Conformance of the autocast wrappers libraries ship (opt-in: ``--wrapper``): a library
declares its region factory, region runner, forward decorator, float32 island, region swap,
predicate or scaler (``declare``) and is held to its declaration and to autocast's contract
(``region``, ``runner``, ``forward``, ``nesting``, ``island``, ``swap``, ``predicate``; a
scaler to the gradscaler family's training orders, ``scaling``), on its own device's state
alone (``other_devices``)."""

from amp_conformance.checks.wrappers.declare import (
    DeclarationError,
    Float32Island,
    ForwardDecorator,
    Predicate,
    RegionFactory,
    RegionRunner,
    RegionSwap,
    Scaler,
    validate,
)
from amp_conformance.core.registry import Check

__all__ = ["CHECKS", "DeclarationError", "Float32Island", "ForwardDecorator", "Predicate",
           "RegionFactory", "RegionRunner", "RegionSwap", "Scaler", "validate"]

CHECKS = (
    Check("wrappers", "opt-in (--wrapper MODULE:NAME): a library's autocast region factory, "
          "region runner, forward decorator, float32 island, region swap, predicate or scaler "
          "keeps its declaration and autocast's contract",
          opt_in="--wrapper"),
)

from amp_conformance.checks.wrappers.tier import PARAMS, TIER  # noqa: E402,F401
