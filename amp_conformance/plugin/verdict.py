"""The exit status of a run, decided here and nowhere else, by ordered rules.

The facts come from the run's one tally (:func:`amp_conformance.plugin.report.collect.tally`:
every conformance item's outcome, as the report counts it) and from pytest's own status;
the first rule that holds decides:

1. **A lost device** (:mod:`amp_conformance.plugin.health`): exit status 6, whatever else
   happened (under pytest-xdist the controller's stop reads as an interruption).
2. **pytest's own usage error, interruption or internal error**: as pytest says.
3. **An opt-in tier that ran nothing** (:func:`amp_conformance.plugin.outcomes.setup_errors`:
   every item skipped): a setup error, exit status 4, where pytest would say 0 or 5.
4. **Failures**: pytest's 1.
5. **Items not run for a quarantined op** (:mod:`amp_conformance.plugin.quarantine`): a
   partial verdict is no pass: 1.
6. **Nothing executed**: conformance items were selected and not one ran: 5 (pytest's "no
   tests ran"), unless ``--amp-allow-empty`` (a deliberately narrow selection).
7. Otherwise 0.

It also turns SIGTERM, which pytest does not handle, into an interruption (as Ctrl-C is),
so the report is written and says the run was interrupted by SIGTERM. Crashes,
``os._exit`` and hangs cannot be seen from inside the process that dies: see ``python -m
amp_conformance run`` (:mod:`amp_conformance.tools.run`).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

import pytest

from amp_conformance.plugin import outcomes
from amp_conformance.plugin.report.collect import END, tally
from amp_conformance.plugin.report.journal import quarantined
from amp_conformance.plugin.xdist_roles import is_worker

#: the exit status of a run stopped by a lost device (pytest uses 0-5, ``run`` 3)
DEVICE_LOST = 6
#: how a session stopped for a lost device says so (pytest's Failed, an xdist controller's
#: Interrupted): plugin.health stops it so
STOP = "amp-conformance: DEVICE LOST"
_INTERRUPTED_BY = pytest.StashKey[str]()
_PREVIOUS_HANDLER = pytest.StashKey[Any]()
#: the config of the running session, for hooks pytest calls without one
_CONFIG: dict[str, pytest.Config] = {}


@dataclass(frozen=True)
class Facts:
    """What the rules read: the run's device losses, setup errors, quarantined items and
    whether any conformance item executed."""

    lost: bool = False
    setup_errors: tuple[str, ...] = ()
    quarantined: bool = False
    nothing_executed: bool = False


def exit_status(status: int, facts: Facts) -> int:
    """The run's exit status from pytest's ``status`` and the run's facts (the rules above)."""
    ok, empty = pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED
    if facts.lost:
        return DEVICE_LOST
    if facts.setup_errors and status in (ok, empty):
        return pytest.ExitCode.USAGE_ERROR
    if status != ok:
        return status
    if facts.quarantined:
        return pytest.ExitCode.TESTS_FAILED
    if facts.nothing_executed:
        return empty
    return ok


def facts(config: pytest.Config) -> Facts:
    """The facts of this process's run, from its tally (nothing on an xdist worker)."""
    acc = tally(config)
    if acc is None:
        return Facts()
    allow_empty = config.getoption("amp_allow_empty", False)
    rows = outcomes.rows(config)
    return Facts(lost=bool(acc.lost),
                 setup_errors=() if allow_empty else tuple(outcomes.setup_errors(rows)),
                 quarantined=bool(quarantined(acc)),
                 nothing_executed=not allow_empty and nothing_executed(rows))


def nothing_executed(rows: list[dict[str, Any]]) -> bool:
    """Conformance items were selected, and not one of them ran."""
    return bool(rows) and all(r["outcome"] in ("skipped", "not run") for r in rows)


def is_loss_stop(exc: BaseException) -> bool:
    """Whether an interruption is a session stopped for a lost device."""
    return str(exc).startswith(STOP)


def interrupted_by(config: pytest.Config) -> str | None:
    """What interrupted the run: "SIGTERM", "KeyboardInterrupt" (Ctrl-C), or None."""
    return config.stash.get(_INTERRUPTED_BY, None)


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config
    if not is_worker(config) and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        def on_sigterm(signum: int, frame: Any) -> None:
            config.stash[_INTERRUPTED_BY] = "SIGTERM"
            raise KeyboardInterrupt("SIGTERM")

        config.stash[_PREVIOUS_HANDLER] = signal.signal(signal.SIGTERM, on_sigterm)


def pytest_unconfigure(config: pytest.Config) -> None:
    _CONFIG.pop("config", None)
    previous = config.stash.get(_PREVIOUS_HANDLER, None)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    config = _CONFIG.get("config")
    if config is not None and _INTERRUPTED_BY not in config.stash and not is_loss_stop(
            excinfo.value):
        config.stash[_INTERRUPTED_BY] = "KeyboardInterrupt"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The one place the exit status is set (before the report writes it down)."""
    config = session.config
    if is_worker(config):
        return
    found = facts(config)
    session.exitstatus = exit_status(session.exitstatus, found)
    config.stash[END] = {"interrupted_by": interrupted_by(config),
                         "setup_errors": list(found.setup_errors)}


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if is_worker(config):
        return
    rows = outcomes.rows(config)
    if nothing_executed(rows):
        terminalreporter.write_sep(
            "!", f"amp-conformance: no conformance check executed ({len(rows)} selected, all "
                 "skipped): this run proves nothing about the device", red=True, bold=True)
    for error in config.stash.get(END, {}).get("setup_errors", []):
        terminalreporter.write_sep("!", f"amp-conformance: SETUP ERROR: {error}", red=True,
                                   bold=True)
