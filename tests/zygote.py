"""A process that has imported torch and forks the project's tests' children on request
(``python -m pytest`` and ``python -m amp_conformance``): each child then skips an
interpreter's start and torch's import, which are most of a small child's time.

Run by :mod:`tests.children` as ``python tests/zygote.py SOCKET``; it serves until its
standard input closes (the test process that started it ended). A request is one packet:
the module, its arguments, the working directory and the environment, with the child's
standard streams as passed descriptors. The answer is two packets: the child's pid, then
its exit status as ``subprocess`` reports it (negative: the signal that ended it).

A child is what ``python -m MODULE ARGS`` would be in that folder and environment: its
``sys.path`` is rebuilt from both, its ``random`` reseeded, and it ends through the
interpreter's own exit (atexit handlers run). Only torch is imported here, not pytest's
plugins or the suite, so that pytest rewrites what it would rewrite in a fresh process;
:mod:`tests.children` forks only where torch would read the same environment at import.
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
from typing import NoReturn

#: modules every child imports, at a cost paid once here: torch and what the first compile
#: and the first ``assert_close`` import. None starts a Python thread.
WARM = ("torch", "torch._dynamo", "torch.distributed.tensor")


def _base_path() -> list[str]:
    """This interpreter's ``sys.path`` less what a child's folder and PYTHONPATH add."""
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if os.path.abspath(p) not in own]


def _become(request: dict, fds: list[int], base: list[str], closing: list[socket.socket]
            ) -> NoReturn:
    """In the forked child: become ``python -m MODULE ARGS``; never returns."""
    code = 1
    try:
        for sock in closing:
            sock.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *extra, *base]
        sys.argv = ["-m", *request["args"]]
        sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
        import random

        random.seed()
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        raise SystemExit(exc.code) from None
    except BaseException:  # noqa: BLE001 - printed as a fresh interpreter would
        import traceback

        traceback.print_exc()
    raise SystemExit(code)


def serve(path: str) -> None:
    import importlib
    import threading

    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this torch lacks is simply not warmed
            continue
    if threading.active_count() != 1:  # native pools (OpenBLAS's) handle a fork themselves
        raise SystemExit("zygote: a Python thread was started while warming; not forking")
    import gc

    gc.freeze()
    base = _base_path()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 0.02)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            break  # the test process ended
        if listener in ready:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                _become(json.loads(message), fds, base, [listener, conn, *children.values()])
            for fd in fds:
                os.close(fd)
            conn.sendall(f"{pid}".encode())
            children[pid] = conn
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}".encode())
                except OSError:
                    pass
                conn.close()
    for pid in children:
        try:
            os.killpg(pid, 9)
        except OSError:
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
