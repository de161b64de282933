"""The amp-conformance pytest plugin: every hook in one place.

Registered through the ``pytest11`` entry point, so it is active wherever the package is
installed; it only parametrizes tests that ask for its fixtures, and only validates the
device when the run collects the conformance suite.
"""

from __future__ import annotations

import sys

import pytest

from amp_conformance.plugin.heap import import_frozen

with import_frozen():  # the collector paused for torch's import (plugin/heap.py)
    import torch

from amp_conformance.checks import profiles
from amp_conformance.core import dispatch, sync
from amp_conformance.core.errors import NotApplicable, describe_error, release_frames
from amp_conformance.core.state import ItemState, StateLeak
from amp_conformance.core.target import Target
from amp_conformance.plugin import options, parametrize
from amp_conformance.plugin.items import START_STATE, is_conformance
from amp_conformance.plugin.options import Settings

#: plugins of the vendor workflow: declarations (capabilities, expected failures), report
pytest_plugins = (  # each before the modules that import it, so pytest rewrites it
    "amp_conformance.plugin.vendor",
    "amp_conformance.plugin.report.collect",
    "amp_conformance.plugin.outcomes",
    "amp_conformance.plugin.verdict",
    "amp_conformance.plugin.statistics",
    "amp_conformance.plugin.quarantine",
    "amp_conformance.plugin.warned",
    "amp_conformance.plugin.limits",  # before: a limit explains a kernel it seems to lack
    "amp_conformance.plugin.missing_kernels",
    "amp_conformance.plugin.health",
    "amp_conformance.plugin.processes",
    "amp_conformance.plugin.distribution",
    "amp_conformance.plugin.tiers",
    "amp_conformance.plugin.deferred_repr",  # last: its report wrapper wraps the others
)

MARKERS = (
    "amp_check(name): the conformance check an item performs (policy, numerics, outside, "
    "legacy, or a named device-generic check)",
    "amp_needs_values: the check compares values, so it does not apply to fake tensors",
    "amp_needs(*capabilities): the item needs these vendor capabilities beyond its family's "
    "(skipped with the declared reason where one is absent)",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from amp_conformance.plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # The host project's root conftest has now added its options: take the aliases it left.
    result = yield
    options.add_aliases(parser)
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    dispatch.release_shared()  # the kernel-entry observers' registrations end with the run


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    profiles.configure(config)


def settings(config: pytest.Config) -> Settings:
    """The run's settings, validated on first use (raises pytest.UsageError)."""
    # Imported here, not at the top: session_settings imports the vendor plugin module,
    # which pytest must import itself (from pytest_plugins) to rewrite its asserts.
    from amp_conformance.plugin.session_settings import settings as resolved

    return resolved(config)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config):
    # Validate before the session starts, so a bad device fails the run with a usage
    # error: a device that is absent must never look green.
    if not (config.option.help or config.option.version):
        settings(config)
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = settings(config)
    dtypes = ", ".join(str(d).removeprefix("torch.") for d in s.amp_dtypes)
    mode = "fake (FakeTensorMode, no numerics)" if s.fake else "real"
    return [
        f"amp-conformance: torch {torch.__version__}, device {s.device} ({mode}), "
        f"autocast dtypes {dtypes}, numerics {s.numerics}"
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize.parametrize(metafunc, settings(metafunc.config))


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """A check that does not apply here raises NotApplicable: its item is skipped with the
    reason, never passed. A check that passed but left state behind fails (the isolation
    restores it at teardown)."""
    try:
        result = yield
    except NotApplicable as exc:
        if not is_conformance(pyfuncitem):
            raise
        pytest.skip(str(exc))
    start = pyfuncitem.stash.get(START_STATE, None)
    if start is not None:
        leaked = start.diff(ItemState.capture(settings(pyfuncitem.config).device))
        if leaked:
            pyfuncitem.stash[_LEAK_SAID] = True
            raise StateLeak(_leak(pyfuncitem, leaked))
    return result


_LEAK_SAID = pytest.StashKey[bool]()


def _leak(item: pytest.Item, leaked: list[str]) -> str:
    return (f"state leaked by {item.nodeid}: " + "; ".join(leaked)
            + " (restored; the item must leave the state as it found it)")


@pytest.fixture(scope="session")
def amp_settings(request: pytest.FixtureRequest) -> Settings:
    """The validated options of this run."""
    return settings(request.config)


@pytest.fixture(autouse=True)
def _amp_isolation(request: pytest.FixtureRequest):
    """Give every conformance item a clean slate and restore it afterwards, pass or fail:
    everything :class:`~amp_conformance.core.state.ItemState` snapshots (the autocast state
    of every device type, the thread's dispatch keys, transforms, modes and print options,
    grad and inference mode, the default dtype and the other global flags). The state the
    item started from is kept on it: an excuse's proof starts from it
    (:mod:`amp_conformance.plugin.excuses`).

    An item that leaves any of it behind (a kernel that turns grad mode off, another
    device's autocast on, a dtype switched and never put back) fails, naming what changed
    (its call, where it passed; else an error at teardown), so the leak is pinned on the
    item that made it, not found later; so does an item after which its device reports
    an error late (a synchronize drains it).
    """
    if not is_conformance(request.node):
        yield
        return
    device = settings(request.config).device
    sync.synchronizer(device)  # chosen once, before any item could leave the device failing
    start = ItemState.capture(device)
    request.node.stash[START_STATE] = start
    try:
        yield
    finally:
        if sync.step_boundary(device) is not None:  # a failure's pending tensors let go:
            release_frames(getattr(sys, "last_value", None))  # no later step computes them
        late = sync.pending(device)
        leaked = start.diff(ItemState.capture(device))
        if leaked:  # a failure's frames may hold a guard (tensor printing's): let them go
            release_frames(getattr(sys, "last_value", None))
            leaked = start.diff(ItemState.capture(device))
        start.restore()
    said = request.node.stash.get(_LEAK_SAID, False)  # failed the call already
    problems = [_leak(request.node, leaked)] if leaked and not said else []
    if late is not None:
        problems.append(f"{device} reported an error after {request.node.nodeid} ended: "
                        f"{describe_error(late, 300)} (drained by a synchronize; an "
                        "asynchronous device's error is the item's that caused it)")
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def amp_target(amp_settings: Settings) -> Target:
    """The device under test (real, or its policy through FakeTensorMode)."""
    return amp_settings.target
