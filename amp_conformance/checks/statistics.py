"""What the property checks' examples exercised, counted per run and shown to the user.

A property passes when none of its examples fails, which proves little if most examples
never reach the assertion that could fail (both sides raise, no tensor is cast, the
device's kernel is never entered). Each example therefore labels what it exercised with
:func:`label` ("core assertion ran", "device mix", "cast payload", ...): the label goes to
``hypothesis.event`` and into the :class:`Reach` of the run, so that

* the project's own tests (``tests/test_statistics.py``) assert floors on the
  shares, and a generator that stops reaching its assertions fails CI;
* a pytest run with ``--hypothesis-show-statistics`` prints them in an
  "amp-conformance property reach" section (the suite's items are not ``@given``
  themselves, so Hypothesis's own statistics do not cover them), and every item that
  ran a property carries its summary as the user property ``amp_property_reach`` (JUnit
  XML, the report).

The pytest hooks that attach and print them are :mod:`amp_conformance.plugin.statistics`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

# Hypothesis is imported where an example runs (below), not where this plugin loads: a
# process that runs no property (an xdist controller) never pays for it.

#: The label every property gives an example that reached an assertion able to fail.
CORE = "core assertion ran"
#: The label of an example Hypothesis was told to discard (``reject``/``assume``).
REJECTED = "rejected"
#: Name of the user property an item's summaries are attached under.
USER_PROPERTY = "amp_property_reach"
_KEEP = 200  # finished runs kept for the hooks; older ones are dropped


@dataclass
class Reach:
    """The labels of one run of a property: how many examples carried each."""

    name: str
    examples: int = 0
    rejected: int = 0
    counts: Counter = field(default_factory=Counter)

    def share(self, text: str) -> float:
        """The share of the run's (not rejected) examples labelled ``text``."""
        return self.counts[text] / self.examples if self.examples else 0.0

    def summary(self) -> str:
        """One line: examples, rejections, then each label's share, most frequent first."""
        shares = ", ".join(f"{100 * n / max(self.examples, 1):.0f}% {text}"
                           for text, n in sorted(self.counts.items(),
                                                 key=lambda kv: (-kv[1], kv[0])))
        return (f"{self.name}: {self.examples} examples ({self.rejected} rejected): "
                f"{shares or 'no labels'}")


_runs: list[Reach] = []          # the runs in progress, innermost last
_finished: list[Reach] = []      # finished runs not yet attached to a pytest item
_labels: list[set[str]] = []     # the labels of the examples in progress, innermost last


@contextlib.contextmanager
def tallied(name: str) -> Iterator[Reach]:
    """Count the examples run inside the block (a property's whole run) into one Reach."""
    reach = Reach(name)
    _runs.append(reach)
    try:
        yield reach
    finally:
        _runs.remove(reach)
        _finished.append(reach)
        del _finished[:-_KEEP]


@contextlib.contextmanager
def example() -> Iterator[None]:
    """One example: the labels given inside are counted once each when it ends; an example
    Hypothesis discards counts as rejected, not in the shares."""
    from hypothesis.errors import UnsatisfiedAssumption

    labels: set[str] = set()
    _labels.append(labels)
    rejected = False
    try:
        yield
    except UnsatisfiedAssumption:
        rejected = True
        raise
    finally:
        _labels.pop()
        for reach in _runs[-1:]:
            if rejected:
                reach.rejected += 1
                reach.counts.update(f"{REJECTED}: {t}" for t in labels)
            else:
                reach.examples += 1
                reach.counts.update(labels)


def current() -> frozenset[str]:
    """The labels the example in progress carries so far (empty outside an example)."""
    return frozenset(_labels[-1]) if _labels else frozenset()


def label(*texts: str) -> None:
    """Mark the example in progress as exercising each of ``texts``."""
    from hypothesis import event
    from hypothesis.errors import InvalidArgument

    for text in texts:
        if _labels:
            _labels[-1].add(text)
        with contextlib.suppress(InvalidArgument):  # called outside a Hypothesis test
            event(text)


def finished() -> list[Reach]:
    """The runs that ended since :func:`forget` (the plugin attaches them to their item)."""
    return list(_finished)


def forget() -> None:
    _finished.clear()
