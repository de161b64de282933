"""What each process of a run pays beyond its items (plugin/processes.py): torch's threads
under pytest-xdist, the heap frozen during the run and at exit, Hypothesis imported past
assertion rewriting; none of it where no conformance item runs."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from amp_conformance.plugin import heap, items, processes
from tests import children

SUITE = ("--pyargs", "amp_conformance.suite.test_oplist", "-k",
         "bfloat16 and torch_16 and test_policy and (mm or bmm)", "-p", "no:cacheprovider")


def test_each_worker_gets_its_share_of_the_cores():
    assert processes.worker_threads(workers=2, available=2) == 1
    assert processes.worker_threads(workers=2, available=16) == 8
    assert processes.worker_threads(workers=16, available=16) == 1
    assert processes.worker_threads(workers=4, available=2) == 1  # never none


class _Item:
    def __init__(self, check: bool):
        self.check = check

    def get_closest_marker(self, name):
        return object() if self.check and name == "amp_check" else None


class _Heap:
    """Stands in for the gc module: records freeze, unfreeze and full collections."""

    def __init__(self, frozen: int = 0):
        self.frozen, self.calls, self.callbacks = frozen, [], []

    def get_freeze_count(self) -> int:
        return self.frozen

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def collect(self) -> None:
        self.calls.append("collect")
        self.full_pass()

    def full_pass(self) -> None:
        for callback in list(self.callbacks):
            callback("start", {"generation": processes.OLDEST})
            callback("stop", {"generation": processes.OLDEST})


class _Plugins:
    def __init__(self):
        self.registered = []

    def register(self, plugin, name):
        self.registered.append(plugin)

    def unregister(self, plugin):
        self.registered.remove(plugin)


def _config(**fields) -> SimpleNamespace:
    return SimpleNamespace(stash=pytest.Stash(), pluginmanager=_Plugins(), **fields)


def _session(workers: int | None, *items: _Item):
    config = _config(option=SimpleNamespace(dist="no"))
    if workers is not None:
        config.workerinput = {"workercount": workers}
    return SimpleNamespace(config=config, items=list(items))


@pytest.fixture
def exit_hooks(monkeypatch):
    registered = []
    monkeypatch.setattr(processes, "_EXIT_FREEZE", [])
    monkeypatch.setattr(processes, "gc", _Heap())
    monkeypatch.setattr(processes.atexit, "register", registered.append)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield registered
    torch.set_num_threads(before)


def test_a_worker_of_a_conformance_run_is_sized_and_restored(exit_hooks, monkeypatch):
    monkeypatch.setattr(processes, "cores", lambda: 8)
    before = torch.get_num_threads()
    session = _session(4, _Item(False), _Item(True))
    processes.pytest_collection_finish(session)
    assert torch.get_num_threads() == 2
    assert exit_hooks == [processes.gc.freeze]
    processes.pytest_unconfigure(session.config)
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("why", ["no conformance item", "the user sized the pool",
                                 "not an xdist worker"])
def test_otherwise_the_threads_are_left_alone(exit_hooks, monkeypatch, why):
    monkeypatch.setattr(processes, "cores", lambda: 8)
    before = torch.get_num_threads()
    if why == "the user sized the pool":
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
    session = _session(None if why == "not an xdist worker" else 4,
                       _Item(why != "no conformance item"))
    processes.pytest_collection_finish(session)
    processes.pytest_unconfigure(session.config)
    assert torch.get_num_threads() == before
    assert exit_hooks == ([] if why == "no conformance item" else [processes.gc.freeze])


def _cleanups(config) -> list:
    config.add_cleanup = config.__dict__.setdefault("cleanups", []).append
    return config.cleanups


def _collected(conformance: bool) -> tuple[SimpleNamespace, list]:
    """A serial session configured and collected (conformance items or not), and the
    cleanups it registered."""
    session = _session(None, _Item(conformance))
    cleanups = _cleanups(session.config)
    processes.pytest_configure(session.config)
    processes.pytest_collection_finish(session)
    return session, cleanups


def test_a_conformance_session_freezes_the_heap_until_its_cleanup(exit_hooks):
    session, cleanups = _collected(True)
    processes.pytest_collection_finish(session)  # once per session
    assert processes.gc.calls == ["freeze"]
    for cleanup in cleanups:
        cleanup()
    assert processes.gc.calls == ["freeze", "unfreeze"]
    assert processes.gc.callbacks == [] and session.config.pluginmanager.registered == []


def test_after_an_item_with_a_full_pass_the_grown_heap_is_collected_and_frozen(exit_hooks):
    """Between items, and only after one during which the collector walked the whole heap:
    the pass the plugin makes itself there is not counted as another."""
    session, cleanups = _collected(True)
    (refreeze,) = session.config.pluginmanager.registered
    refreeze.pytest_runtest_logfinish("a", None)
    assert processes.gc.calls == ["freeze"]
    processes.gc.callbacks[0]("stop", {"generation": 1})  # a young generation's pass
    refreeze.pytest_runtest_logfinish("b", None)
    assert processes.gc.calls == ["freeze"]
    processes.gc.full_pass()
    assert processes.gc.calls == ["freeze"]  # never during the item
    refreeze.pytest_runtest_logfinish("c", None)
    refreeze.pytest_runtest_logfinish("d", None)
    assert processes.gc.calls == ["freeze", "collect", "freeze"]
    for cleanup in cleanups:
        cleanup()
    assert processes.gc.calls[-1] == "unfreeze" and processes.gc.callbacks == []


@pytest.mark.parametrize("why", ["no conformance item", "someone else froze the heap"])
def test_otherwise_the_heap_is_left_as_it_is(exit_hooks, monkeypatch, why):
    if why == "someone else froze the heap":
        monkeypatch.setattr(processes, "gc", _Heap(frozen=1000))
    _, cleanups = _collected(why != "no conformance item")
    for cleanup in cleanups:
        cleanup()
    assert processes.gc.calls == []


@pytest.fixture
def held(exit_hooks, monkeypatch):
    """The heap torch's import left frozen (plugin/heap.py), held for a session."""
    monkeypatch.setattr(processes, "gc", _Heap(frozen=300_000))
    monkeypatch.setattr(heap, "gc", processes.gc)
    monkeypatch.setattr(heap, "_HELD", [os.getpid()])
    return processes.gc


def test_a_conformance_session_claims_the_heap_torchs_import_left(held):
    _, cleanups = _collected(True)
    assert held.calls == ["freeze"] and heap._HELD == []
    for cleanup in cleanups:
        cleanup()
    assert held.calls == ["freeze", "unfreeze"]


@pytest.mark.parametrize("where", ["a run without conformance items", "an xdist controller"])
def test_any_other_run_gets_its_heap_back(held, where):
    if where == "an xdist controller":  # collects nothing; no conformance report came
        session = SimpleNamespace(config=_config(option=SimpleNamespace(dist="load")))
        cleanups = _cleanups(session.config)
        processes.pytest_configure(session.config)
        assert held.calls == []
    else:
        _, cleanups = _collected(False)
        assert held.calls == ["unfreeze"]
    for cleanup in cleanups:
        cleanup()
    assert held.calls == ["unfreeze"] and heap._HELD == []


def test_a_forked_process_leaves_the_heap_its_parent_froze_alone(held, monkeypatch):
    monkeypatch.setattr(heap, "_HELD", [os.getpid() + 1])
    _, cleanups = _collected(True)
    for cleanup in cleanups:
        cleanup()
    assert held.calls == [] and heap._HELD == []


def test_torchs_import_runs_without_the_collectors_passes_and_leaves_its_heap_frozen():
    code = """
import gc, os, sys
from amp_conformance.plugin import heap
passes = []
gc.callbacks.append(lambda phase, info: passes.append(info["generation"]) if phase == "stop" else None)
with heap.import_frozen():
    import torch
print(passes.count(2), gc.get_freeze_count() > 100_000, heap._HELD == [os.getpid()], gc.isenabled())
with heap.import_frozen():  # torch is imported: nothing to do
    import torch
print(heap.claim(), heap._HELD)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split("\n")[:2] == ["0 True True True", "True []"], done.stderr


def test_the_xdist_controller_freezes_at_its_first_conformance_report(exit_hooks):
    config = _config()
    controller = processes._ControllerHeap(config)
    controller.pytest_runtest_logreport(SimpleNamespace(user_properties=[("other", 1)]))
    assert processes.gc.calls == []
    conformance = SimpleNamespace(user_properties=[(items.ITEM_PROPERTY, {"check": "policy"})])
    controller.pytest_runtest_logreport(conformance)
    controller.pytest_runtest_logreport(conformance)
    assert processes.gc.calls == ["freeze"]
    assert exit_hooks == [processes.gc.freeze]


def _probe(pytester, source: str) -> tuple[str, str]:
    """A plugin beside the run (``-p``), whose fixtures reach the suite's items: those live
    outside the run's rootdir, and since pytest 9.1 a rootdir conftest's fixtures reach only
    the items under its folder (pytest#14683)."""
    pytester.makepyfile(amp_probe=source)
    pytester.syspathinsert()
    return ("-p", "amp_probe")


def test_pytests_unraisable_check_runs_while_the_heap_is_frozen(pytester, monkeypatch):
    """In a real session: frozen from the items on, more of it after each item that made a
    full pass (here: every item), still frozen when pytest collects the items' garbage
    after the last one, and no longer frozen once the session has ended."""
    import _pytest.unraisableexception as unraisable

    seen = []
    harder = unraisable.gc_collect_harder
    monkeypatch.setattr(unraisable, "gc_collect_harder",
                        lambda n: (seen.append(gc.get_freeze_count()), harder(n)))
    probe = _probe(pytester, """
        import gc, pytest

        @pytest.fixture(autouse=True)
        def _frozen(record_property):
            record_property("frozen", gc.get_freeze_count())
            yield
            gc.collect()
    """)
    # A session of this process that collected conformance items (the repository's own
    # run collects the suite and these tests together) froze the heap: the inner session
    # would leave a heap frozen by someone else as it is.
    outer = gc.get_freeze_count()
    callbacks = list(gc.callbacks)  # the outer session's among them
    gc.unfreeze()
    try:
        result = pytester.inline_run(*SUITE, *probe)
        passed = result.getreports("pytest_runtest_logreport")
        frozen = [dict(r.user_properties)["frozen"] for r in passed if r.when == "call"]
        assert len(frozen) > 1 and all(n > 0 for n in frozen)
        assert frozen == sorted(frozen) and frozen[-1] > frozen[0]
        assert seen and all(n > 0 for n in seen)  # how often pytest collects is its own
        assert gc.get_freeze_count() == 0
        assert gc.callbacks == callbacks
    finally:
        if outer:
            gc.freeze()


def test_torchs_structured_trace_is_off_during_a_conformance_session(pytester):
    """pytest's log capture gives ``torch.__trace`` a handler in every phase, which turns on
    torch's JSON trace of every compile; during the session the logger propagates instead
    (pytest's capture attaches to it no more; torch finds no handler and writes nothing),
    and it is as before once the session has ended."""
    import logging

    trace = logging.getLogger(processes.TRACE_LOGGER)
    probe = _probe(pytester, """
        import logging, pytest

        @pytest.fixture(autouse=True)
        def _trace(record_property):
            yield
            trace = logging.getLogger("torch.__trace")
            record_property("trace", (trace.propagate, len(trace.handlers)))
    """)
    outer = trace.propagate  # the repository's own run is a conformance session too
    trace.propagate = False
    before = len(trace.handlers)  # this test's own phase's, and torch's placeholder
    try:
        result = pytester.inline_run(*SUITE, *probe)
        seen = [dict(r.user_properties)["trace"]
                for r in result.getreports("pytest_runtest_logreport") if r.when == "teardown"]
        assert seen and set(seen) == {(True, before)}  # none of the inner session's
        assert trace.propagate is False and len(trace.handlers) == before
    finally:
        trace.propagate = outer


def test_import_past_rewriting_restores_the_import_system(tmp_path, monkeypatch):
    class AssertionRewritingHook:  # the name pytest's finder has
        asked: list[str] = []

        def find_spec(self, name, path=None, target=None):
            self.asked.append(name)

    finder = AssertionRewritingHook()
    monkeypatch.setattr(sys, "meta_path", [sys.meta_path[0], finder, *sys.meta_path[1:]])
    before = list(sys.meta_path)
    (tmp_path / "amp_past_rewriting_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(tmp_path)
    monkeypatch.delitem(sys.modules, "amp_past_rewriting_probe", raising=False)
    processes.import_past_rewriting("amp_past_rewriting_probe")
    assert sys.modules["amp_past_rewriting_probe"].VALUE == 1
    assert finder.asked == []
    assert sys.meta_path == before


#: a conftest beside a run: which loader gave each process Hypothesis and xdist's plugin
LOADERS = """
import json, os, sys

def pytest_unconfigure(config):
    role = getattr(config, "workerinput", {}).get("workerid", "main")
    loaders = {name: type(sys.modules[name].__spec__.loader).__name__
               for name in ("hypothesis", "xdist.plugin") if name in sys.modules}
    with open(f"loaders-{role}-{os.getpid()}.json", "w") as out:
        json.dump(loaders, out)
"""
#: a plugin beside a run (``-p amp_probe``): each worker's torch threads, seen from its items
THREADS = """
import json, os, pytest, torch

@pytest.fixture(autouse=True)
def _threads():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"threads-{worker}.json", "w") as out:
        json.dump(torch.get_num_threads(), out)
    yield
"""


def _loaders(folder: Path) -> dict[str, list[dict]]:
    """role -> what each process of that role (``main``: serial or controller) loaded."""
    seen: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("loaders-*.json")):
        seen.setdefault(path.name.split("-")[1], []).append(json.loads(path.read_text()))
    return seen


@pytest.fixture(scope="module")
def xdist_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One ``pytest -n 2`` run of the suite with both probes beside it, the user's thread
    counts unset, in a folder of its own (as pytester runs it): what each test of
    :class:`TestAnXdistRun` reads of it."""
    folder = tmp_path_factory.mktemp("xdist-run")
    (folder / "conftest.py").write_text(LOADERS, encoding="utf-8")
    (folder / "amp_probe.py").write_text(THREADS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in (*processes.USER_THREADS, "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    proc = children.run([sys.executable, "-m", "pytest", f"--basetemp={folder / 'tmp'}",
                           *SUITE, "-p", "amp_probe", "-n", "2"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    return proc, folder


@pytest.mark.slow
class TestAnXdistRun:
    """What the processes of a run pay, read from one ``-n 2`` run (:func:`xdist_run`)."""

    def test_hypothesis_is_imported_past_rewriting_in_every_process(self, pytester, xdist_run):
        """Serial, in xdist workers and in their controller: Hypothesis's modules come from
        their bytecode, not from pytest's rewriting (which other plugins' modules still get)."""
        parallel, folder = xdist_run
        assert parallel.returncode == 0, parallel.stdout[-2000:]
        pytester.makeconftest(LOADERS)
        serial = pytester.runpytest_subprocess(*SUITE)
        assert serial.ret == 0, serial.stdout.str()[-2000:]
        alone, workers = _loaders(pytester.path), _loaders(folder)
        assert sorted(alone) == ["main"] and sorted(workers) == ["gw0", "gw1", "main"]
        assert len(alone["main"]) == len(workers["main"]) == 1  # serial, controller
        for seen in (alone, workers):
            for role, processes_of_role in seen.items():
                for loaders in processes_of_role:
                    assert loaders["xdist.plugin"] == "AssertionRewritingHook", role
                    assert loaders["hypothesis"] != "AssertionRewritingHook", role

    def test_xdist_workers_run_their_items_at_their_share(self, pytester, monkeypatch, xdist_run):
        """Seen from inside the items: under -n 2 each worker runs at cores // 2 threads (at
        least one), and the header says so; with OMP_NUM_THREADS set, at what the user set."""
        result, folder = xdist_run
        assert result.returncode == 0, result.stdout[-2000:]
        share = processes.worker_threads(2, processes.cores())
        pytest.LineMatcher(result.stdout.splitlines()).fnmatch_lines(
            [f"*torch intra-op threads per xdist worker: {share} ({processes.cores()} cores, "
             "2 workers)*"])
        seen = {json.loads(p.read_text()) for p in folder.glob("threads-gw*.json")}
        assert seen == {share}
        probe = _probe(pytester, THREADS)
        for name in processes.USER_THREADS:
            monkeypatch.delenv(name, raising=False)
        mine = share + 1  # the user's count, told apart from the share
        monkeypatch.setenv("OMP_NUM_THREADS", str(mine))
        result = pytester.runpytest_subprocess(*SUITE, *probe, "-n", "2")
        assert result.ret == 0, result.stdout.str()[-2000:]
        result.stdout.fnmatch_lines(["*torch threads per xdist worker as you set them "
                                     f"(OMP_NUM_THREADS={mine})*"])
        assert {json.loads(p.read_text()) for p in pytester.path.glob("threads-gw*.json")} == \
            {mine}
