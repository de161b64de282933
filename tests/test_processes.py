"""What each process of a run pays beyond its items (plugin/processes.py): torch's threads
under pytest-xdist, the heap frozen at exit; neither where no conformance item runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from amp_conformance.plugin import processes

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


def _session(workers: int | None, *items: _Item):
    config = SimpleNamespace(stash=pytest.Stash())
    if workers is not None:
        config.workerinput = {"workercount": workers}
    return SimpleNamespace(config=config, items=list(items))


@pytest.fixture
def exit_hooks(monkeypatch):
    registered = []
    monkeypatch.setattr(processes, "_EXIT_FREEZE", [])
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


def test_xdist_workers_run_their_items_at_their_share(pytester, monkeypatch):
    """Seen from inside the items: under -n 2 each worker runs at cores // 2 threads (at
    least one), and the header says so; with OMP_NUM_THREADS set, at what the user set."""
    pytester.makeconftest("""
        import json, os, pytest, torch

        @pytest.fixture(autouse=True)
        def _threads():
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with open(f"threads-{worker}.json", "w") as out:
                json.dump(torch.get_num_threads(), out)
            yield
    """)
    for name in processes.USER_THREADS:
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest_subprocess(*SUITE, "-n", "2")
    assert result.ret == 0, result.stdout.str()[-2000:]
    share = processes.worker_threads(2, processes.cores())
    result.stdout.fnmatch_lines([f"*torch intra-op threads per xdist worker: {share} "
                                 f"({processes.cores()} cores, 2 workers)*"])
    seen = {json.loads(p.read_text()) for p in pytester.path.glob("threads-gw*.json")}
    assert seen == {share}
    mine = share + 1  # the user's count, told apart from the share
    monkeypatch.setenv("OMP_NUM_THREADS", str(mine))
    for p in pytester.path.glob("threads-*.json"):
        p.unlink()
    result = pytester.runpytest_subprocess(*SUITE, "-n", "2")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*torch threads per xdist worker as you set them "
                                 f"(OMP_NUM_THREADS={mine})*"])
    assert {json.loads(p.read_text()) for p in pytester.path.glob("threads-gw*.json")} == {mine}
