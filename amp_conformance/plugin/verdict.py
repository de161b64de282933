"""A run must not read as a pass by accident.

- **Nothing executed.** A run whose conformance items were all skipped or deselected
  proves nothing about the device; it ends with exit status 5 (pytest's "no tests ran")
  and says so loudly, unless ``--amp-allow-empty`` asks for exit 0 (for a deliberately
  narrow selection).
- **SIGTERM.** pytest does not handle it: the process would die without a summary or a
  report. Here it becomes an interruption (as Ctrl-C is), so the report is written and
  says the run was interrupted by SIGTERM.
- **A lost device** (:mod:`amp_conformance.plugin.health`) stops the session with exit
  status 6; under pytest-xdist the controller's stop is then no interruption.

Crashes, ``os._exit`` and hangs cannot be seen from inside the process that dies: see
``python -m amp_conformance run`` (:mod:`amp_conformance.tools.run`).
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from amp_conformance.plugin.xdist_roles import is_worker

MARKER = "amp_check"
_EXECUTED = pytest.StashKey[int]()
_SEEN = pytest.StashKey[int]()
_INTERRUPTED_BY = pytest.StashKey[str]()
_PREVIOUS_HANDLER = pytest.StashKey[Any]()


#: the config of the running session, for hooks pytest calls without one
_CONFIG: dict[str, pytest.Config] = {}


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config
    config.stash[_EXECUTED] = 0
    config.stash[_SEEN] = 0
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


def interrupted_by(config: pytest.Config) -> str | None:
    """What interrupted the run: "SIGTERM", "KeyboardInterrupt" (Ctrl-C), or None."""
    return config.stash.get(_INTERRUPTED_BY, None)


def pytest_keyboard_interrupt(excinfo: Any) -> None:
    from amp_conformance.plugin.health import is_loss_stop  # imported by pytest_plugins first

    config = _CONFIG.get("config")
    if config is not None and _INTERRUPTED_BY not in config.stash and not is_loss_stop(
            excinfo.value):
        config.stash[_INTERRUPTED_BY] = "KeyboardInterrupt"


class Counter:
    """Counts conformance items seen and executed, on the process that runs the session."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: Any) -> None:
        if MARKER not in getattr(report, "keywords", {}):
            return
        stash = self.config.stash
        if report.when == "setup":
            stash[_SEEN] += 1
        ran = (report.when == "call" and not report.skipped) or (
            report.when == "setup" and report.failed)
        if ran:
            stash[_EXECUTED] += 1


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if not is_worker(session.config):
        session.config.pluginmanager.register(Counter(session.config), "amp-conformance-verdict")


def nothing_executed(config: pytest.Config) -> bool:
    """Conformance items were selected, and not one of them ran."""
    return config.stash.get(_SEEN, 0) > 0 and config.stash.get(_EXECUTED, 0) == 0


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if is_worker(config) or config.getoption("amp_allow_empty", False):
        return
    if session.exitstatus == pytest.ExitCode.OK and nothing_executed(config):
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not is_worker(config) and nothing_executed(config):
        seen = config.stash.get(_SEEN, 0)
        terminalreporter.write_sep(
            "!", f"amp-conformance: no conformance check executed ({seen} selected, all "
                 "skipped): this run proves nothing about the device", red=True, bold=True)
