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
- **Exit.** An interpreter that has run the suite spends about a second at exit in the
  garbage collector's passes over the heap of torch, dynamo and the items (1.1 s of 1.3 s
  here); each xdist worker pays it before its controller can end. At exit, and only then,
  the heap is frozen (:func:`gc.freeze`): every ``atexit`` handler still runs and every
  object the modules hold is still released; the collector no longer searches the heap
  for cycles, which the operating system frees with the process.
"""

from __future__ import annotations

import atexit
import gc
import os

import pytest
import torch

from amp_conformance.plugin.xdist_roles import is_worker, is_xdist_controller, worker_input

#: environment variables with which a user sizes torch's intra-op pool themselves
USER_THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_SAVED = pytest.StashKey[int]()
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


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # Only a run with conformance items: the plugin is loaded in every project that
    # installs the package, and leaves the processes of other test suites as they are.
    config = session.config
    if not any(item.get_closest_marker("amp_check") for item in session.items):
        return
    if not _EXIT_FREEZE:  # once per process, however many sessions it runs (pytester)
        atexit.register(gc.freeze)
        _EXIT_FREEZE.append(True)
    workers = _workers(config)
    if workers is None or any(os.environ.get(name) for name in USER_THREADS):
        return
    config.stash[_SAVED] = torch.get_num_threads()
    torch.set_num_threads(worker_threads(workers, cores()))


def pytest_unconfigure(config: pytest.Config) -> None:
    saved = config.stash.get(_SAVED, None)
    if saved is not None:
        torch.set_num_threads(saved)


def pytest_report_header(config: pytest.Config) -> list[str]:
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or not workers or not is_xdist_controller(config):
        return []
    if any(os.environ.get(name) for name in USER_THREADS):
        chosen = ", ".join(f"{n}={os.environ[n]}" for n in USER_THREADS if os.environ.get(n))
        return [f"amp-conformance: torch threads per xdist worker as you set them ({chosen})"]
    return [f"amp-conformance: torch intra-op threads per xdist worker: "
            f"{worker_threads(workers, cores())} ({cores()} cores, {workers} workers)"]
