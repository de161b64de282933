"""A process that has imported torch and forks the project's tests' children on request
(``python -m pytest``, ``python -m amp_conformance``, and the xdist workers such a child
starts): each child then skips an interpreter's start and torch's import, which are most
of a small child's time.

Run by :mod:`tests.children` as ``python tests/zygote.py SOCKET``; it serves until its
standard input closes (the test process that started it ended), whose first line names the
file of the checkout's code the test process compiled for it (below), or none. A request
is one packet: the module and its arguments (or, for an xdist worker, the code of
``python -u -c``), the working directory and the environment, with the child's standard
streams as passed descriptors. The answer is two packets: the child's pid, then its exit status as
``subprocess`` reports it (negative: the signal that ended it). :class:`Child` makes the
request and shows the child as ``subprocess.Popen`` would.

A child is what ``python -m MODULE ARGS`` (or ``python -u -c CODE``) would be in that
folder and environment: its ``sys.path`` is rebuilt from both, its ``random`` reseeded, and
it ends through the interpreter's own exit (atexit handlers run). Only torch is imported
here, not pytest's plugins or the suite, so that pytest rewrites what it would rewrite in a
fresh process; where no bytecode is written (PYTHONDONTWRITEBYTECODE), the checkout's
modules are compiled, and they and the pytest plugins' modules (pytest-xdist's, ...)
rewritten as pytest rewrites them, once by the test process for its zygotes, and every
child takes them from its zygote. A child is forked only where torch and the interpreter
would read the same environment at their start (:func:`same_start`). A
forked ``pytest`` has its xdist workers forked too (execnet's popen gateway): each from a
zygote of a pool, started fresh, so that workers hash with seeds of their own as fresh ones
would.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Any, NoReturn

#: modules every child imports, at a cost paid once here: torch and what the first compile
#: and the first ``assert_close`` import. None starts a Python thread.
WARM = ("torch", "torch._dynamo", "torch.distributed.tensor")
#: variables read when an interpreter starts or torch and its libraries are imported
AT_IMPORT = ("PYTHON", "TORCH", "PYTORCH", "ATEN", "OMP", "KMP", "GOMP", "MKL", "ONEDNN",
             "DNNL", "OPENBLAS", "CUDA", "NVIDIA", "TRITON", "LD_", "LC_", "LANG", "TZ",
             "MALLOC", "XLA", "PJRT", "HIP", "ROCM", "HSA", "NCCL", "KINETO", "HYPOTHESIS")
#: of those, what a child reads only when it runs: PYTHONPATH (its sys.path is rebuilt; a
#: folder of it with a sitecustomize module, run at the start, is never forked) and
#: inductor's cache folder (which inductor itself sets in the test process on first use)
AT_RUN = ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")
#: the modules a child may run forked (``python -m MODULE``)
MODULES = ("pytest", "amp_conformance")


def same_start(env: dict[str, str], started: dict[str, str]) -> bool:
    """Whether a fresh interpreter in ``env`` would start and import torch as one in
    ``started`` did (the zygote's environment)."""
    return all(env.get(name) == started.get(name) for name in set(env) | set(started)
               if name.startswith(AT_IMPORT) and name not in AT_RUN) and not any(
        os.path.exists(os.path.join(folder, f"{name}customize.py"))
        for folder in env.get("PYTHONPATH", "").split(os.pathsep) if folder
        for name in ("site", "user"))


class Child:
    """A forked child, as ``subprocess.Popen`` shows one; ``stdin``/``stdout`` are the
    caller's ends of pipes where it made them (an xdist worker's), else None."""

    stdin: Any = None
    stdout: Any = None
    stderr: Any = None

    def __init__(self, path: str, request: dict, fds: tuple[int, int, int], args: list[str]):
        self.args = args
        self.returncode: int | None = None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.connect(path)
        socket.send_fds(self._sock, [json.dumps(request).encode()], list(fds))
        self.pid = int(self._sock.recv(64))

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._sock.settimeout(timeout)
            try:
                said = self._sock.recv(64)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            if not said:
                raise ChildProcessError(f"the zygote ended before child {self.pid} did: "
                                        f"its exit status is lost ({self.args})")
            self.returncode = int(said)
            self._sock.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and not select.select([self._sock], [], [], 0)[0]:
            return None  # no answer yet: running
        return self.wait()

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.killpg(self.pid, sig)
            except OSError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _free(pool: list[str], serving: dict[str, Child]) -> str | None:
    """A zygote of ``pool`` none of whose workers still runs (its answer is the exit status)."""
    for path in pool:
        child = serving.get(path)
        try:
            if child is None or child.poll() is not None:
                return path
        except ChildProcessError:  # that zygote ended: not one to fork from
            continue
    return None


def _fork_xdist_workers(path: str, started: dict[str, str], pool: list[str]) -> None:
    """In a forked child: execnet's popen gateways (xdist's workers) forked from a zygote
    too, where a fresh ``python -u -c`` would be the same. Fresh workers without
    PYTHONHASHSEED each hash with a seed of their own (the checks of an order stable across
    workers rely on it): each is forked from a zygote of ``pool`` that no running worker
    came from, or started fresh where none is free; with PYTHONHASHSEED set they share one,
    this zygote's."""
    try:
        from execnet import gateway_io
    except ImportError:
        return
    original = gateway_io.Popen2IOMaster.__init__
    bootstrap = [sys.executable, "-u", "-c", gateway_io.popen_bootstrapline]
    serving: dict[str, Child] = {}

    def __init__(self, args, execmodel) -> None:
        env = dict(os.environ)
        forkable = (list(args) == bootstrap and env.get("AMP_CONFORMANCE_FORK") != "0"
                    and same_start(env, started))
        server = forkable and (path if "PYTHONHASHSEED" in env else _free(pool, serving))
        if not server:
            original(self, args, execmodel)
            return
        worker_in, to_worker = os.pipe()
        from_worker, worker_out = os.pipe()
        request = {"code": args[3], "args": [], "env": env, "cwd": os.getcwd()}
        try:
            child = Child(server, request, (worker_in, worker_out, 2), list(args))
        except OSError:  # the zygote is gone: a fresh worker, as without one
            for fd in (to_worker, from_worker):
                os.close(fd)
            original(self, args, execmodel)
            return
        finally:
            os.close(worker_in)
            os.close(worker_out)
        serving[server] = child
        child.stdin, child.stdout = os.fdopen(to_worker, "wb"), os.fdopen(from_worker, "rb")
        self.popen = child
        gateway_io.Popen2IO.__init__(self, child.stdin, child.stdout, execmodel=execmodel)

    gateway_io.Popen2IOMaster.__init__ = __init__


def shell(real: str, script: str | None, path: str, pool: list[str],
          started: dict[str, str]) -> NoReturn:
    """``python`` (``script`` None) or a console script of its (``pytest``) for a shell's
    commands (:func:`tests.children.on_path`): forked from the zygote at ``path`` where a
    fresh one would be the same (``python -m pytest`` and ``python -m amp_conformance``,
    the script with any arguments), else ``real`` itself; exits as the child did."""
    args = sys.argv[1:]
    fresh = [real, *args] if script is None else [real, script, *args]
    if script is not None:
        request: dict[str, Any] | None = {"script": script, "args": args}
    elif len(args) > 1 and args[0] == "-m" and args[1] in MODULES:
        request = {"module": args[1], "args": args[2:]}
    else:
        request = None
    env = dict(os.environ)
    if (request is None or env.get("AMP_CONFORMANCE_FORK") == "0"
            or not same_start(env, started) or not os.path.exists(path)):
        os.execv(real, fresh)
    request.update(env=env, cwd=os.getcwd(), pool=pool)
    child = Child(path, request, (0, 1, 2), fresh)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # to the child's session
        signal.signal(sig, lambda number, frame: child.send_signal(number))
    code = child.wait()
    if code < 0:  # ended by a signal: so is this process, as the shell expects
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    raise SystemExit(code)


def _base_path() -> list[str]:
    """This interpreter's ``sys.path`` less what a child's folder and PYTHONPATH add."""
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [p for p in sys.path[1:] if os.path.abspath(p) not in own]


def _unbuffered_stdio() -> None:
    """The standard streams of ``python -u`` (stdin buffered, as there)."""
    import io

    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=encoding, errors=errors)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding,
                                  errors=errors, write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=encoding,
                                  errors="backslashreplace", write_through=True)


def _become(request: dict, fds: list[int], base: list[str], closing: list[socket.socket],
            path: str) -> NoReturn:
    """In the forked child: become ``python -m MODULE ARGS`` (or ``python -u -c CODE``);
    never returns."""
    code = 1
    try:
        started = dict(os.environ)
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
        import random

        random.seed()
        if "code" in request:
            sys.path[:] = ["", *extra, *base]
            sys.argv = ["-c"]
            sys.orig_argv = [sys.executable, "-u", "-c", request["code"]]
            _unbuffered_stdio()
            import types

            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(request["code"], "<string>", "exec"), main.__dict__)  # noqa: S102
        elif "script" in request:  # a console script: its folder first on sys.path
            script = request["script"]
            sys.path[:] = [os.path.dirname(script), *extra, *base]
            sys.argv = [script, *request["args"]]
            sys.orig_argv = [sys.executable, script, *request["args"]]
            _fork_xdist_workers(path, started, request.get("pool", []))
            import runpy

            runpy.run_path(script, run_name="__main__")
        else:
            sys.path[:] = [os.getcwd(), *extra, *base]
            sys.argv = ["-m", *request["args"]]
            sys.orig_argv = [sys.executable, "-m", request["module"], *request["args"]]
            _fork_xdist_workers(path, started, request.get("pool", []))
            import runpy

            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        raise SystemExit(exc.code) from None
    except BaseException:  # noqa: BLE001 - printed as a fresh interpreter would
        import traceback

        traceback.print_exc()
    raise SystemExit(code)


#: the checkout's folders whose modules the children import from source
SOURCES = ("amp_conformance", "examples", "tests/backends", "tests/faults")


def cached_compile(cache: dict[str, tuple[bytes, Any]], original: Any) -> Any:
    """``SourceLoader.source_to_code`` answering from ``cache`` (path -> (source, code)):
    the code ``compile`` gives for the very same bytes and file name, else ``original``'s."""
    def source_to_code(self, data, path, *, _optimize=-1):  # noqa: ANN001, ANN202
        hit = cache.get(path)
        if hit is not None and _optimize == -1 and hit[0] == data:
            return hit[1]
        return original(self, data, path, _optimize=_optimize)

    return source_to_code


def cached_rewrite(cache: dict[str, tuple[bytes, Any]], original: Any) -> Any:
    """pytest's ``_rewrite_test`` answering from ``cache`` (path -> (source, rewritten
    code)) where the file is unchanged and no assertion pass hook is asked for (the one
    setting the rewrite reads), else ``original``'s."""
    import importlib.util

    def _rewrite_test(fn, config):  # noqa: ANN001, ANN202
        hit = cache.get(str(fn))
        if hit is not None and (config is None
                                or not config.getini("enable_assertion_pass_hook")):
            source = fn.read_bytes()
            if source == hit[0]:
                return importlib.util.source_hash(source), hit[1]
        return original(fn, config)

    return _rewrite_test


def compiled(paths: list[str]) -> tuple[dict[str, tuple[bytes, Any]], dict[str, tuple[bytes, Any]]]:
    """Each file's code as the import system compiles it, and as pytest rewrites and
    compiles it (path -> (source, code)); where either warns, the file is left out of that
    one, so that the child that compiles it warns."""
    import ast
    import warnings

    from _pytest.assertion import rewrite

    plain: dict[str, tuple[bytes, Any]] = {}
    rewritten: dict[str, tuple[bytes, Any]] = {}
    for path in paths:
        with open(path, "rb") as source:
            data = source.read()
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                code = compile(data, path, "exec", dont_inherit=True)
            if not said:
                plain[path] = (data, code)
            tree = ast.parse(data, filename=path)
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                rewrite.rewrite_asserts(tree, data, path, None)
                code = compile(tree, path, "exec", dont_inherit=True)
            if not said:
                rewritten[path] = (data, code)
        except (SyntaxError, ValueError):
            continue
    return plain, rewritten


#: of the modules pytest rewrites, those a child imports past its rewriting (from bytecode:
#: amp_conformance.plugin.processes.import_past_rewriting), left out of :func:`plugin_sources`
PAST_REWRITING = ("hypothesis",)


def plugin_sources() -> list[str]:
    """The files of the modules pytest rewrites in every child, as it finds them: those of
    the installed distributions that register a pytest plugin (pytest-xdist's, ...), less
    :data:`PAST_REWRITING`."""
    import importlib.metadata
    import importlib.util

    from _pytest.config import _iter_rewritable_modules

    files = []
    for dist in importlib.metadata.distributions():
        if not any(ep.group == "pytest11" for ep in dist.entry_points):
            continue
        for name in _iter_rewritable_modules([str(f) for f in dist.files or ()]):
            spec = None if name in PAST_REWRITING else importlib.util.find_spec(name)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                continue
            if spec.submodule_search_locations:  # a package: every file of it
                files += [f for folder in spec.submodule_search_locations
                          for f in _python_files(folder)]
            else:
                files.append(spec.origin)
    return files


def _python_files(folder: str) -> list[str]:
    return [os.path.join(where, name) for where, _, names in os.walk(folder)
            for name in names if name.endswith(".py")]


def sources() -> list[str]:
    """The files of :data:`SOURCES`, then :func:`plugin_sources` (each file once)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own = [f for folder in SOURCES for f in _python_files(os.path.join(root, folder))]
    return list(dict.fromkeys(own + plugin_sources()))


def write_compiled(path: str) -> bool:
    """:func:`compiled` of :func:`sources`, marshalled into ``path`` (whole or not at all),
    for the zygotes of one test process to share; False where no bytecode is written."""
    import marshal

    if not sys.dont_write_bytecode:
        return False
    with open(path + ".part", "wb") as out:
        out.write(marshal.dumps(compiled(sources())))
    os.replace(path + ".part", path)
    return True


def _compile_sources(shared: str | None) -> None:
    """Where no bytecode is written (PYTHONDONTWRITEBYTECODE), every child would compile
    the checkout's modules from source and pytest rewrite the asserts of its plugin and
    test modules and of the other plugins' (:func:`sources`): both are done once, by the
    test process for its zygotes (``shared``, the file :func:`write_compiled` wrote) or
    here, and a child takes the code of a file that has not changed from here."""
    if not sys.dont_write_bytecode:
        return
    import marshal
    from importlib import _bootstrap_external as external

    from _pytest.assertion import rewrite

    if shared is not None:
        with open(shared, "rb") as data:
            plain, rewritten = marshal.loads(data.read())
    else:
        plain, rewritten = compiled(sources())
    external.SourceLoader.source_to_code = cached_compile(
        plain, external.SourceLoader.source_to_code)
    rewrite._rewrite_test = cached_rewrite(rewritten, rewrite._rewrite_test)


def _shared_compiled() -> str | None:
    """The test process's first line on standard input: the file of the checkout's code it
    compiled for its zygotes, or none (an empty line); the process ends with that of the
    test process (end of input)."""
    line = b""
    while not line.endswith(b"\n"):
        more = os.read(sys.stdin.fileno(), 1)
        if not more:
            raise SystemExit(0)  # the test process ended
        line += more
    return line.decode().strip() or None


def serve(path: str) -> None:
    import gc
    import importlib
    import threading

    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this torch lacks is simply not warmed
            continue
    if threading.active_count() != 1:  # native pools (OpenBLAS's) handle a fork themselves
        raise SystemExit("zygote: a Python thread was started while warming; not forking")
    _compile_sources(_shared_compiled())
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
                _become(json.loads(message), fds, base,
                        [listener, conn, *children.values()], path)
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
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
