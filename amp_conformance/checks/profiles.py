"""Hypothesis profiles of the property checks: ``ci``, ``dev`` and ``nightly``.

The profile is chosen with ``--amp-hypothesis-profile`` (default ``ci``). The profiles
are registered in Hypothesis under namespaced names (``amp-conformance-<name>``) and are
applied to the suite's own property checks only, through :func:`selected`, rather than
loaded as Hypothesis's global default: the plugin is active in every project that
installs the package, and that project's own Hypothesis tests keep their own profile
(and Hypothesis's ``--hypothesis-profile`` option keeps its meaning).

* ``ci``: derandomized (the same examples on every run and every pytest-xdist worker),
  no deadline (the first call of a torch op is slow), few examples, no example
  database, no "explain" phase: a green CI run is reproducible and takes seconds, and
  a red one still prints the shrunk example.
* ``dev``: random examples, the default example database (a failure found once is
  replayed first next time), a moderate number of examples.
* ``nightly``: thousands of examples and longer state-machine runs.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # Hypothesis is imported where a property runs, not where the plugin loads
    from hypothesis import settings

#: Name of the pytest option, and the ``config`` attribute it is stored under.
OPTION = "--amp-hypothesis-profile"
DEST = "amp_hypothesis_profile"
DEFAULT = "ci"
PREFIX = "amp-conformance-"


@functools.cache
def profiles() -> dict[str, Any]:
    """The profiles' settings, each registered in Hypothesis under its namespaced name.
    Built on first use: the plugin loads in processes that run no property (an xdist
    controller), where importing Hypothesis would only delay the workers' start."""
    from hypothesis import HealthCheck, Phase, settings

    built = {
        "ci": settings(
            derandomize=True,
            database=None,
            deadline=None,
            max_examples=25,
            stateful_step_count=25,
            print_blob=False,
            # The checks build tensors and call torch ops: generation is cheap, but the
            # first examples pay torch's one-time costs.
            suppress_health_check=[HealthCheck.too_slow],
            # No "explain" phase: on a failing state machine it costs several times the
            # shrinking, for a list of covered lines; the shrunk example is still printed.
            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        ),
        "dev": settings(
            deadline=None,
            max_examples=200,
            stateful_step_count=40,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
        "nightly": settings(
            deadline=None,
            max_examples=3000,
            stateful_step_count=60,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    }
    for name, each in built.items():
        settings.register_profile(PREFIX + name, each)
    return built


#: Overrides for an item that checks one part of a property: one op of a policy, one rule
#: of the region machine (beside the base rules). The parts' items together run more
#: examples than the property's single item did, and each part gets at least as many as
#: it drew there (an example there picked one op among several, one rule among seven).
_PART: dict[str, dict[str, int]] = {
    "ci": {"max_examples": 10},
    "dev": {"max_examples": 60},
    "nightly": {"max_examples": 1000},
}

NAMES = ("ci", "dev", "nightly")

_selected = DEFAULT


def configure(config: pytest.Config) -> None:
    """Record the profile chosen on the command line (called from pytest_configure)."""
    name = config.getoption(DEST, default=DEFAULT) or DEFAULT
    select(name)


def select(name: str) -> None:
    """Make ``name`` the profile of the property checks; raise pytest.UsageError if unknown."""
    global _selected
    if name not in NAMES:
        raise pytest.UsageError(
            f"{OPTION} {name!r}: unknown profile; choose one of {', '.join(NAMES)}"
        )
    _selected = name


def selected_name() -> str:
    return _selected


def selected(**overrides: object) -> settings:
    """The settings of the chosen profile (``ci`` unless another was selected).

    ``overrides`` adjust single settings, e.g. a larger ``max_examples`` where the
    project's own tests must be sure to find a planted bug.
    """
    from hypothesis import settings

    return settings(profiles()[_selected], **overrides)


def selected_part(**overrides: object) -> settings:
    """The settings of the chosen profile for an item that checks one part of a property
    (one op, one state machine rule): fewer examples per item (:data:`_PART`)."""
    return selected(**{**_PART[_selected], **overrides})
