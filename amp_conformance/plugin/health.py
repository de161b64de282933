"""A lost device is named once and never blamed on later items.

A device-side assert leaves a CUDA context unusable: every later item of the process then
fails with the same error, and a report would count them all as the device's failures.
So, after each conformance item that ran, the process that runs the items checks the
device: the backend's probe (``pytest_amp_conformance_device_health``), or for a real
non-CPU device a synchronize and a tiny op; nothing on CPU or with ``--fake`` unless a
backend declares a probe. When the device is lost, the item that lost it fails saying so,
the session stops at once, the run exits with :data:`DEVICE_LOST` and the report counts the
items left as not run.

Under xdist a loss the probe blames on an op (``… in aten::baddbmm``, now quarantined:
plugin/quarantine.py) ends only its worker, once the item's reports are sent: xdist starts a
fresh worker, which runs the items the lost one had not, and every worker then stops the
op's callers before they reach the device. A loss no op is blamed for (a dead device) still
stops the whole run, and so does any loss under a scheduler that would run the item the
worker "crashed" in once more (``--dist loadscope``, ``loadfile``, ``loadgroup``: only
``load`` and ``worksteal`` hand it back as failed).

``--amp-resume PATH`` deselects the items an earlier process ran:
``python -m amp_conformance run`` restarts a run in a fresh process with it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from amp_conformance.core import sync
from amp_conformance.core.errors import describe_error, headline, release_frames
from amp_conformance.plugin import quarantine, vendor
from amp_conformance.plugin.items import LOST_PROPERTY, has_conformance_items, is_conformance
from amp_conformance.plugin.session_settings import settings
from amp_conformance.plugin.verdict import DEVICE_LOST, STOP
from amp_conformance.plugin.xdist_roles import (
    DIST_KEY,
    is_worker,
    is_xdist_controller,
    scheduler,
    worker_input,
)

HOOK = "pytest_amp_conformance_device_health"
#: what a lost device says, besides the backend's own words
WORDS = ("AcceleratorError", "device-side assert", "CUDA error", "illegal memory access",
         "sticky")
_LOST = pytest.StashKey[list]()


@dataclass
class Health:
    """How this process tells that its device is lost."""

    probe: Callable[[], None] | None
    patterns: tuple[re.Pattern[str], ...]
    #: what the probe raised once after the last item, the device usable again: an error
    #: the device reported late, which is that item's
    late: BaseException | None = None

    def loss(self, failure: str | None, release: Callable[[], None] = lambda: None
             ) -> str | None:
        """Why the device counts as lost after an item that failed with ``failure``
        (``TypeName: message``, or None), or None while it is usable. A probe that fails is
        tried again after ``release`` (the failed item's frames let go): a lazy device
        (XLA) runs the pending graph of every live tensor at the next read, so the tensors
        of a graph that failed, while the failure holds them, fail the probe too."""
        self.late = None
        if self.probe is None:
            said = bool(failure) and any(p.search(failure) for p in self.patterns)
            return f"the item raised {headline(failure)[:300]}" if said else None
        try:
            self.probe()
        except Exception as first:  # noqa: BLE001 - judged on the second try
            release()
            try:
                self.probe()
            except Exception as exc:  # noqa: BLE001 - whatever it raises, the device is gone
                raised = f"; the item raised {headline(failure)[:300]}" if failure else ""
                return f"the device health probe raised {describe_error(exc, 300)}{raised}"
            self.late = first  # usable again: an error the device reported late, the item's
        return None


def _usage(where: str, problem: str) -> pytest.UsageError:
    return pytest.UsageError(f"amp-conformance: {where}: {problem}")


def declared(config: pytest.Config, device: str) -> tuple[list[Callable[[], None]], list[str]]:
    """The probes and lost-device patterns the backend's hooks declare (a usage error
    names the hook implementation whose result is malformed)."""
    try:
        results = vendor.hook_results(config, HOOK, device)
    except vendor.DeclarationError as exc:
        raise pytest.UsageError(f"amp-conformance: {exc}") from None
    probes: list[Callable[[], None]] = []
    patterns: list[str] = []
    for where, result in results:
        if callable(result):
            result = {"probe": result}
        if not isinstance(result, Mapping) or set(result) - {"probe", "patterns"}:
            raise _usage(where, f"returned {result!r:.80}; expected a probe (a callable) or a "
                                "dict with the keys probe and patterns")
        probe, words = result.get("probe"), result.get("patterns") or []
        if probe is not None and not callable(probe):
            raise _usage(where, f"the probe is {type(probe).__name__}, not callable")
        if isinstance(words, str) or not all(isinstance(w, str) for w in words):
            raise _usage(where, f"patterns must be a list of regular expressions, not {words!r:.80}")
        for word in words:
            try:
                re.compile(word)
            except re.error as exc:
                raise _usage(where, f"pattern {word!r}: {exc}") from None
        probes += [probe] if probe is not None else []
        patterns += words
    return probes, patterns


def _works(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except Exception:  # noqa: BLE001 - a step the backend does not support is left out
        return False
    return True


def default_probe(device: str) -> Callable[[], None] | None:
    """A synchronize (``torch.accelerator``'s, else the device module's) and a tiny op on
    ``device``, each kept only if it works now, before any item ran; None if nothing does."""
    synchronize = sync.synchronizer(device)

    def tiny() -> None:
        (torch.ones(1, device=device) + 1).cpu()

    if not _works(tiny):
        return None

    def probe() -> None:
        if synchronize is not None:
            synchronize()
        tiny()

    return probe


def _all(probes: list[Callable[[], None]]) -> Callable[[], None]:
    def probe() -> None:
        for each in probes:
            each()

    return probe


def wanted(config: pytest.Config) -> tuple[str, list[Callable[[], None]], tuple[re.Pattern[str], ...]] | None:
    """(device, declared probes, lost-device patterns) of a run whose device can be lost, or
    None (``--fake``; CPU without a declared probe or patterns). Touches no device."""
    s = settings(config)
    if s.fake:
        return None
    probes, words = declared(config, s.device)
    if s.device == "cpu" and not (probes or words):
        return None
    return s.device, probes, tuple(re.compile(w, re.IGNORECASE) for w in (*WORDS, *words))


def start(device: str, probes: list[Callable[[], None]], patterns: tuple[re.Pattern[str], ...]
          ) -> Health:
    """The health check of the process that runs the items, its probe tried once before any
    item ran: a declared probe that fails then is a usage error; of the default one, what
    works is kept (nothing: the patterns alone decide)."""
    if not probes:
        return Health(default_probe(device), patterns)
    probe = _all(probes)
    try:
        probe()
    except Exception as exc:  # noqa: BLE001 - a vendor probe may raise anything
        raise pytest.UsageError(f"amp-conformance: hook {HOOK}: the probe fails before any "
                                f"item ran: {describe_error(exc)}") from None
    return Health(probe, patterns)


#: xdist schedulers that, when a worker dies, report the item it died in and give only the
#: items after it to other workers (loadscope and its kin run that item once more)
REPLACEABLE = ("load", "worksteal")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each worker its controller's scheduler (a worker's own ``dist`` option is "no"),
    and let the controller send to a worker that has just ended (:func:`tolerate_ended`)."""
    node.workerinput[DIST_KEY] = scheduler(node.config)
    if node.workerinput[DIST_KEY] in REPLACEABLE:
        tolerate_ended(node)


def tolerate_ended(node: Any) -> None:
    """Two workers that lose their devices at once end at once; the controller, handing the
    first one's items on, may then send to the second before it has heard that it ended, and
    xdist lets that OSError end the run (INTERNALERROR). A command to a worker that has
    ended is dropped instead, as xdist drops its own "shutdown" to one: xdist hears of the
    end next, and hands on the items it had sent there."""
    send = node.sendcommand

    def sendcommand(name: str, **kwargs: object) -> None:
        try:
            send(name, **kwargs)
        except OSError:  # the pipe to the worker is gone: so is the worker
            pass

    node.sendcommand = sendcommand


def _replaceable(config: pytest.Config) -> bool:
    """Whether this process is an xdist worker whose controller can replace it after a loss."""
    return is_worker(config) and scheduler(config) in REPLACEABLE


def lost(config: pytest.Config) -> list[dict[str, Any]]:
    """The device losses this session saw: ``{nodeid, worker, reason}`` each."""
    return config.stash.get(_LOST, [])


WATCH, OBSERVER = "amp-conformance-health-watch", "amp-conformance-health"


def _observe(config: pytest.Config) -> Observer:
    config.stash[_LOST] = []
    observer = Observer(config)
    config.pluginmanager.register(observer, OBSERVER)
    return observer


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # the xdist controller runs no item: it only hears of the losses
    if is_xdist_controller(session.config) and wanted(session.config) is not None:
        _observe(session.config)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if is_xdist_controller(config) or config.option.collectonly:
        return
    found = wanted(config)
    if found is None or not has_conformance_items(session.items):
        return
    config.pluginmanager.register(Watch(start(*found)), WATCH)
    if not is_worker(config):
        _observe(config).selected = len(session.items)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption("amp_resume", None)
    if not path:
        return
    try:
        done = set(Path(path).read_text(encoding="utf-8").splitlines())
    except OSError as exc:
        raise pytest.UsageError(f"amp-conformance: --amp-resume {path}: {exc.strerror or exc}"
                                ) from None
    kept = [item for item in items if item.nodeid not in done]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = kept


def _failure(call: pytest.CallInfo) -> str | None:
    excinfo = call.excinfo
    return None if excinfo is None else f"{excinfo.typename}: {excinfo.value}"


def _release(call: pytest.CallInfo) -> Callable[[], None]:
    """What lets go of the tensors a failed item's frames hold (its report is made)."""
    return lambda: release_frames(call.excinfo.value if call.excinfo is not None else None)


class Watch:
    """Registered where the items run: checks the device after each conformance item."""

    def __init__(self, health: Health):
        self.health = health
        #: the item after whose protocol this xdist worker ends (its device lost, the op blamed)
        self.end_after: pytest.Item | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        result = yield
        if self.end_after is item:
            # Every report of the item is sent; xdist has not heard that its protocol is
            # complete, so it holds this item as the one the worker "crashed" in (the
            # controller's pytest_handlecrashitem below adds no second report for it), gives
            # the items this worker had not run to the others and starts a fresh worker.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(DEVICE_LOST)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        ran = report.when == "call" or (report.when == "setup" and report.failed)
        if ran and is_conformance(item):
            reason = self.health.loss(_failure(call), _release(call))
            if reason is not None:
                self._lost(item, report, reason)
            elif self.health.late is not None:
                _late(item, report, self.health.late)
        return report

    def _lost(self, item: pytest.Item, report: pytest.TestReport, reason: str) -> None:
        worker = worker_input(item.config).get("workerid")
        before = f"\n\n{report.longreprtext}" if report.failed else ""
        report.outcome = "failed"
        if hasattr(report, "wasxfail"):
            del report.wasxfail
        op = quarantine.blame(item.config, reason)  # the op it blames: no other item calls it
        replaced = bool(worker and op and _replaceable(item.config))
        after = (f"this worker ends here and a fresh one runs the items after it; {op} is "
                 "quarantined" if replaced else
                 "the run stops here and the items after it are not run (python -m "
                 "amp_conformance run runs them in a fresh process)")
        report.longrepr = (f"DEVICE LOST during this item: {reason}\nThe device is unusable "
                           f"for the rest of this process: {after}.{before}")
        report.user_properties.append((LOST_PROPERTY, {"worker": worker, "reason": reason,
                                                       "replaced": replaced}))
        if replaced:
            self.end_after = item
            return
        on = f" on {worker}" if worker else ""
        item.session.shouldfail = (f"{STOP} during {item.nodeid}{on}: the run stops "
                                   f"(exit status {DEVICE_LOST})")


def _late(item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """Fail the item whose device reported an error after it ran (its own, reported late)."""
    before = f"\n\n{report.longreprtext}" if report.failed else ""
    report.outcome = "failed"
    if hasattr(report, "wasxfail"):
        del report.wasxfail
    report.longrepr = (f"the device reported an error after {item.nodeid} ran: "
                       f"{describe_error(error, 300)} (drained by the health probe's "
                       "synchronize; an asynchronous device's error is the item's that caused "
                       f"it){before}")


class Observer:
    """Registered where the session's reports arrive (the xdist controller included):
    records the losses (plugin.verdict makes the exit status of them) and says how many
    items were not run."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.selected: int | None = None
        self.started = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if self.selected is None:
            self.selected = len(ids)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.started += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in getattr(report, "user_properties", ()):
            if name == LOST_PROPERTY:
                lost(self.config).append({"nodeid": report.nodeid, **value})

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker that ended itself after losing its device in ``crashitem`` (see
        :class:`Watch`) did not crash in it: the item already failed, saying why, so xdist's
        "crashed while running" report is made an empty teardown, counted nowhere."""
        if any(x["nodeid"] == crashitem and x.get("replaced") for x in lost(self.config)):
            report.outcome, report.when, report.longrepr = "passed", "teardown", None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        not_run = max(0, (self.selected or 0) - self.started)
        for loss in lost(self.config):
            on = f" on {loss['worker']}" if loss.get("worker") else ""
            then = ("the worker was replaced" if loss.get("replaced")
                    else f"{not_run} items not run")
            terminalreporter.write_sep(
                "!", f"{STOP} after {loss['nodeid']}{on}: {then} "
                     f"(exit status {DEVICE_LOST}; {loss['reason']})", red=True, bold=True)
        losses = lost(self.config)
        if not_run and losses and all(x.get("replaced") for x in losses):
            terminalreporter.write_sep(
                "!", f"{not_run} items not run: pytest-xdist stopped replacing workers (its "
                     "--max-worker-restart, by default 4 per worker)", red=True, bold=True)
