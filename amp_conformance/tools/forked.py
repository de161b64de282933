"""Children forked from a process that has imported torch, pytest and the suite already:
a child then costs its collection, not an interpreter's start and torch's import. Used by
``run`` for its children, by ``selftest`` for its runs and by ``atlas`` for each device's
cells."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import IO, Any


class Forked:
    """A child forked from this process, which has imported torch and the suite already:
    a restart then costs the child's collection, not an interpreter's start and torch's
    import (2.3 s of 3.4 s here). It runs ``pytest.main`` (or ``main``) in a session of its
    own, as the subprocess would; what a process needs of the parent (no device touched, no thread
    started) holds for ``run``, which only reads reports."""

    def __init__(self, args: list[str], out: int | None = None, env: dict[str, str] | None = None,
                 cwd: str | None = None, main: Callable[[], int] | None = None):
        self.returncode: int | None = None
        sys.stdout.flush()  # what this process printed is printed once, not by the child too
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            code = 1
            try:
                os.setsid()
                if out is not None:  # its output to a file of the caller's
                    os.dup2(out, 1)
                    os.dup2(out, 2)
                if cwd is not None:
                    os.chdir(cwd)
                if env is not None:
                    os.environ.clear()
                    os.environ.update(env)
                if main is not None:  # a function of the caller's instead of pytest
                    code = int(main())
                else:
                    import pytest

                    sys.argv = ["pytest", *args]
                    code = int(pytest.main(args))
            except BaseException:  # noqa: BLE001 - whatever ends the child, it exits
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, flags)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self) -> int | None:
        return self._reap(0)


#: modules every child imports on first use, at a cost paid once here instead of in each:
#: torch.testing's assert_close imports the DTensor package (0.6 s), the suite imports
#: pytest, Hypothesis, dynamo and its own checks (not its test modules, which pytest
#: rewrites). None of them touches a device.
WARM = ("pytest", "hypothesis", "torch.distributed.tensor", "torch._dynamo",
        "amp_conformance.checks.policy.check", "amp_conformance.checks.backward.check",
        "amp_conformance.checks.regions.machine", "amp_conformance.checks.policy.property")


def warm() -> None:
    """Import :data:`WARM`, then freeze the heap: a child's garbage collections (pytest runs
    them at its end) then skip everything inherited from here."""
    import gc
    import importlib

    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this torch lacks is simply not warmed
            continue
    gc.freeze()


def pytest_args(command: list[str]) -> list[str] | None:
    """The pytest arguments of a ``python -m pytest`` command, or None for another."""
    return command[3:] if command[:3] == [sys.executable, "-m", "pytest"] else None


def can_fork() -> bool:
    """Whether a child may be forked from this process: POSIX, no CUDA context here, and
    ``AMP_CONFORMANCE_FORK`` not 0."""
    import torch

    return (hasattr(os, "fork") and os.environ.get("AMP_CONFORMANCE_FORK") != "0"
            and not torch.cuda.is_initialized())


def launch(command: list[str], out: IO[Any] | None = None, env: dict[str, str] | None = None,
           cwd: str | None = None) -> Any:
    """The child process of ``command``: forked where this process allows it
    (:func:`can_fork`), else a subprocess; either in a process group of its own, so that a
    hung child is killed with what it started (xdist workers), its output (both streams) to
    ``out`` where one is given."""
    args = pytest_args(command)
    if args is not None and can_fork():
        warm()
        # the parent imported the plugin's modules: too late to rewrite their asserts
        return Forked([*args, "-W", "ignore::pytest.PytestAssertRewriteWarning"],
                      None if out is None else out.fileno(), env, cwd)
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=out,
                            stderr=None if out is None else subprocess.STDOUT,
                            start_new_session=True)
