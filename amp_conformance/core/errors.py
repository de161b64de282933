"""The one failure type of the suite: an autocast behaviour that departs from what is expected."""

from __future__ import annotations


class ConformanceFailure(AssertionError):
    """An autocast behaviour that departs from the op list."""
