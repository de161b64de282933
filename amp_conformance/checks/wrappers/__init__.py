"""Conformance of the autocast wrappers libraries ship (opt-in: ``--wrapper``)."""

from amp_conformance.checks.wrappers.declare import (
    DeclarationError,
    ForwardDecorator,
    RegionFactory,
    validate,
)

__all__ = ["DeclarationError", "ForwardDecorator", "RegionFactory", "validate"]
