"""The one seam for opt-in tiers: a family whose items exist only when an option asks for them
(the compiled tier ``--amp-compile``, the operator surface ``--amp-opinfo``, library wrappers
``--wrapper``). A family declares its tier as ``TIER``, an instance of a small subclass of
:class:`Tier`; the plugin adds its options, resolves them with the run's settings, leaves its
suite functions out of a run that did not ask for it (:mod:`amp_conformance.plugin.tiers`),
and gives it its report sections. ``plugin.outcomes`` fails a run whose tier ran nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Run:
    """What the plugin tells a tier of the run while it resolves it."""

    device: str
    #: the vendor's hook results: hook name -> [(where, result)], each validated by the
    #: plugin (a hook that raises is a usage error naming it)
    hooks: Callable[[str], list[tuple[str, Any]]]
    #: an xdist controller: it runs no item, its workers do
    controller: bool = False


class Tier:
    """An opt-in tier: the defaults of everything but :attr:`check`, :attr:`options` and
    :meth:`resolve`."""

    #: the check its suite functions declare (``@pytest.mark.amp_check``)
    check: str = ""
    #: its command-line options: name -> argparse keywords (``dest``, ``help``, …)
    options: Mapping[str, Mapping[str, Any]] = {}

    def resolve(self, config: Any, run: Run) -> Mapping[str, Any]:
        """The run's settings fields it sets, validated (raise ``pytest.UsageError`` naming
        the option and what is allowed)."""
        raise NotImplementedError

    def enabled(self, settings: Any) -> bool:
        """Whether this run asked for the tier."""
        raise NotImplementedError

    def collects(self, settings: Any, function: str) -> bool:
        """Whether the suite function ``function`` of the tier has items in this run."""
        return self.enabled(settings)

    def case(self, case: Any, settings: Any) -> Any:
        """A per-entry tier's case for an op-list case (its id says the tier's setting)."""
        return case

    def summary(self, results: list[dict[str, Any]]) -> Mapping[str, Any]:
        """The report's fields of the tier, from its results (none by default)."""
        return {}

    def html(self, data: dict[str, Any]) -> str:
        """The HTML report's section of the tier ("" for none)."""
        return ""

    def markdown(self, data: dict[str, Any]) -> list[str]:
        """The Markdown report's lines of the tier."""
        return []

    def release(self) -> None:
        """Undo what the tier registered for the run (kernels, caches), at its end."""
