"""What each process of a run pays beyond its items: its CPU threads, its exit.

Both only in a process that collected conformance items (the plugin is loaded wherever the
package is installed; other test suites' processes are left as they are).

- **Threads under pytest-xdist.** torch sizes its intra-op pool to every core of the
  machine, in every process: ``-n 2`` on two cores then runs four busy threads on two cores,
  and the workers' items take about twice their serial time (the whole gain of the second
  worker, measured with ``benchmarks/suite_speed.py``). Each worker gets its share of the
  cores (at least one), unless the user chose (``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``
  set); the worker's previous count is restored when its session ends. No check depends on
  it: the control and the autocast call of an item run in the same process, at the same count.
- **The heap during the run.** Every full pass of the garbage collector walks the whole heap:
  torch, dynamo and the collected items, about 230,000 objects before the first item. A
  serial run made 14 such passes (2.1 s of its 15 s) and pytest adds two more after the
  last item (its unraisable-exception check), which each xdist worker pays before its
  controller can end. Once the items are collected (in the xdist controller: at the first
  conformance report), what is alive is frozen (:func:`gc.freeze`): the collector leaves it
  alone, and still collects everything the items make, so pytest's check still sees their
  garbage. The heap still grows during the run (dynamo, Hypothesis and the modules the
  checks import on first use), and a full pass then walks all of it again: after an item
  during which the collector made a full pass, the rest of the heap is collected and what
  is alive is frozen too, between items, so no item's own cycles are ever frozen while it
  runs. It is unfrozen when the session's cleanup ends, after pytest's check; a heap
  someone else froze is left as it is, and the one torch's import left frozen
  (``plugin/heap.py``) is claimed as the session's own.
- **Hypothesis, past assertion rewriting.** pytest rewrites the asserts of every module of a
  distribution that ships a pytest plugin, Hypothesis included: each process then compiles
  Hypothesis from source (0.8 s here, under ``PYTHONDONTWRITEBYTECODE``, against 0.13 s
  from its bytecode), and its engine runs its own rewritten asserts in every example (a
  serial run took 1.5 s longer). The suite imports Hypothesis from its installed bytecode
  (:func:`import_past_rewriting`) before its test modules do; so does the xdist controller
  of a conformance run, whose only use of it is the summary of Hypothesis's plugin. The
  asserts of the suite's own modules are rewritten as before.
- **torch's structured trace.** torch writes a JSON record of every compile (its graphs'
  code, guards, timings) to its ``torch.__trace`` logger whenever that logger has a handler;
  it never propagates, so pytest's log capture attaches a handler of its own to it in every
  phase of every item, and every compile of the run then builds records nobody asked for
  and files them into the item's captured log. Unless ``TORCH_TRACE`` asks for the trace,
  the logger propagates for the session: pytest's capture reaches it through the root
  logger instead, torch's placeholder handler removes itself at the first record as it
  does outside pytest, and torch writes no more.
- **Exit.** The same passes at exit (1.1 s of a 1.3 s exit here): at exit, and only then,
  the heap is frozen again: every ``atexit`` handler still runs and every object the
  modules hold is still released; the collector no longer searches the heap for cycles,
  which the operating system frees with the process.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
import sys

import pytest
import torch

from amp_conformance.plugin import heap
from amp_conformance.plugin.items import has_conformance_items, info_of
from amp_conformance.plugin.xdist_roles import is_worker, is_xdist_controller, worker_input

#: environment variables with which a user sizes torch's intra-op pool themselves
USER_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_SAVED = pytest.StashKey[int]()
_FROZEN = pytest.StashKey[bool]()
_REFREEZE = pytest.StashKey["_Refreeze"]()
_CONFORMANCE = pytest.StashKey[bool]()  # this process collected, or was sent, conformance items
_TRACE_PROPAGATED = pytest.StashKey[bool]()
#: torch's structured-trace logger (torch._logging._internal.trace_log)
TRACE_LOGGER = "torch.__trace"
_EXIT_FREEZE: list[bool] = []


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_threads(workers: int, available: int) -> int:
    """Intra-op threads per worker: its share of the cores, at least one."""
    return max(1, available // max(1, workers))


def _workers(config: pytest.Config) -> int | None:
    """How many xdist workers this run has, where this process is one of them; else None."""
    return int(worker_input(config).get("workercount") or 1) if is_worker(config) else None


def pytest_configure(config: pytest.Config) -> None:
    # Registered now so that it runs after pytest's own cleanup (its unraisable-exception
    # check collects garbage there): cleanups run last-registered first, and this hook
    # runs before those of pytest's builtin plugins.
    config.add_cleanup(lambda: _unfreeze(config))
    if is_xdist_controller(config):
        config.pluginmanager.register(_ControllerHeap(config), "amp-conformance-heap")


#: the generation of the collector's full passes
OLDEST = 2


class _Refreeze:
    """Registered while this session holds the heap frozen: notes the collector's full
    passes (a gc callback); at the end of an item during which one ran, it collects the
    heap that grew since the last freeze and freezes what is alive."""

    def __init__(self) -> None:
        self.full_pass = False

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == OLDEST:
            self.full_pass = True

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        if self.full_pass:
            gc.collect()
            gc.freeze()
            self.full_pass = False


def _freeze(config: pytest.Config) -> None:
    """Move what is alive now out of the collector's reach, for this session."""
    if config.stash.get(_CONFORMANCE, False):
        return
    config.stash[_CONFORMANCE] = True
    # Someone else's frozen heap is theirs to unfreeze; this session leaves it alone. The
    # one torch's import left frozen (plugin/heap.py) is this session's.
    config.stash[_FROZEN] = heap.claim() or gc.get_freeze_count() == 0
    if config.stash[_FROZEN]:
        gc.freeze()
        refreeze = config.stash[_REFREEZE] = _Refreeze()
        gc.callbacks.append(refreeze)
        config.pluginmanager.register(refreeze, "amp-conformance-refreeze")
    if not _EXIT_FREEZE:  # once per process, however many sessions it runs (pytester)
        atexit.register(gc.freeze)
        _EXIT_FREEZE.append(True)


def _unfreeze(config: pytest.Config) -> None:
    heap.release()
    refreeze = config.stash.get(_REFREEZE, None)
    if refreeze is not None:
        gc.callbacks.remove(refreeze)
        config.pluginmanager.unregister(refreeze)
        del config.stash[_REFREEZE]
    if config.stash.get(_FROZEN, False):
        gc.unfreeze()
        config.stash[_FROZEN] = False


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if not has_conformance_items(session.items):
        heap.release()
        return
    _freeze(config)
    _quiet_trace(config)
    workers = _workers(config)
    if workers is None or any(os.environ.get(name) for name in USER_THREADS):
        return
    config.stash[_SAVED] = torch.get_num_threads()
    torch.set_num_threads(worker_threads(workers, cores()))


class _ControllerHeap:
    """The xdist controller collects nothing: its first conformance report tells it."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.config.stash.get(_CONFORMANCE, False) and info_of(report) is not None:
            _freeze(self.config)


def _quiet_trace(config: pytest.Config) -> None:
    trace = logging.getLogger(TRACE_LOGGER)
    if not os.environ.get("TORCH_TRACE") and not trace.propagate:
        trace.propagate = True
        config.stash[_TRACE_PROPAGATED] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_TRACE_PROPAGATED, False):
        logging.getLogger(TRACE_LOGGER).propagate = False
    saved = config.stash.get(_SAVED, None)
    if saved is not None:
        torch.set_num_threads(saved)


def import_past_rewriting(name: str) -> None:
    """Import module ``name`` as Python would outside pytest: past pytest's assertion
    rewriting (which still applies to every other import), from its installed bytecode."""
    if name in sys.modules:
        return
    rewriting = [(i, finder) for i, finder in enumerate(sys.meta_path)
                 if type(finder).__name__ == "AssertionRewritingHook"]
    for _, finder in reversed(rewriting):
        sys.meta_path.remove(finder)
    try:
        importlib.import_module(name)
    finally:
        for i, finder in rewriting:
            sys.meta_path.insert(i, finder)


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # Hypothesis's plugin imports Hypothesis here, in every process; in the controller of
    # a conformance run, from its bytecode.
    config = terminalreporter.config
    if (is_xdist_controller(config) and config.stash.get(_CONFORMANCE, False)
            and config.pluginmanager.has_plugin("hypothesispytest")):
        import_past_rewriting("hypothesis.internal.observability")


def pytest_report_header(config: pytest.Config) -> list[str]:
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or not workers or not is_xdist_controller(config):
        return []
    if any(os.environ.get(name) for name in USER_THREADS):
        chosen = ", ".join(f"{n}={os.environ[n]}" for n in USER_THREADS if os.environ.get(n))
        return [f"amp-conformance: torch threads per xdist worker as you set them ({chosen})"]
    return [f"amp-conformance: torch intra-op threads per xdist worker: "
            f"{worker_threads(workers, cores())} ({cores()} cores, {workers} workers)"]
