"""The project's tests' child processes: :func:`run` is ``subprocess.run`` and
:func:`popen` ``subprocess.Popen`` (what pytester's ``runpytest_subprocess`` starts), forking
``python -m pytest`` and ``python -m amp_conformance`` (and the xdist workers they start)
from a process that has imported torch already
(:mod:`tests.zygote`, started on first use with the :data:`POOL` that forks xdist workers)
instead of starting an interpreter that imports it again: most of a small child's time.

It forks only where the child would be the same as a fresh one: the command is
``sys.executable -m MODULE`` without interpreter options, and every variable read at the
interpreter's or torch's import (``PYTHON*``, ``TORCH*``, the thread and math libraries',
the locale) is what the zygote started with. Otherwise, and where
``AMP_CONFORMANCE_FORK=0``, it is ``subprocess`` itself. A child is a process of its own
in a session of its own (a timeout kills what it started too); its exit status is the
one ``subprocess`` would report.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests import zygote

#: the modules a child may run forked
MODULES = zygote.MODULES


#: zygotes that fork only xdist workers, each started fresh and so hashing with a seed of
#: its own: the two workers of ``-n 2`` (and a replacement) hash as fresh ones would
POOL = 2


class _Zygote:
    """The zygote that forks children, and :data:`POOL` more that fork their xdist workers
    (started together, each a fresh interpreter)."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="amp-zygote-")
        self.env = dict(os.environ)
        self.paths = [os.path.join(self.folder, f"socket{i}") for i in range(POOL + 1)]
        self.path, self.pool = self.paths[0], self.paths[1:]
        self.processes = [subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("zygote.py")), path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self.env, cwd=self.folder)
            for path in self.paths]
        self.process = self.processes[0]
        # the checkout's code compiled here once, while the zygotes import torch, for all
        shared = os.path.join(self.folder, "compiled.marshal")
        try:
            line = (shared if zygote.write_compiled(shared) else "").encode() + b"\n"
        except OSError:  # each zygote compiles for itself
            line = b"\n"
        try:
            for process in self.processes:
                process.stdin.write(line)
                process.stdin.flush()
        except OSError:  # a zygote that ended: none is used
            self.ready = False
        else:
            self.ready = all([p.stdout.readline() == b"ready\n" for p in self.processes])
        atexit.register(self.close)

    def serves(self, env: dict[str, str]) -> bool:
        return (self.ready and all(p.poll() is None for p in self.processes)
                and zygote.same_start(env, self.env))

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.stdin.close()
        for process in self.processes:
            if process.returncode is None:
                process.wait(10)
            process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_zygote: _Zygote | None = None


def _module(args: list[str]) -> tuple[str, list[str]] | None:
    """The module and its arguments of ``python -m MODULE ...`` (or ``-mMODULE``)."""
    if len(args) < 2 or args[0] != sys.executable or not args[1].startswith("-m"):
        return None
    module, rest = (args[2], args[3:]) if args[1] == "-m" else (args[1][2:], args[2:])
    return (module, rest) if module in MODULES else None


def _forkable(args: list[str], env: dict[str, str]) -> _Zygote | None:
    global _zygote
    if (os.environ.get("AMP_CONFORMANCE_FORK") == "0" or not hasattr(os, "fork")
            or _module(args) is None):
        return None
    if _zygote is None:
        _zygote = _Zygote()
    return _zygote if _zygote.serves(env) else None


def _fd(spec: Any, default: int) -> int:
    """The descriptor a child's stream goes to: None (the caller's), a descriptor or a file."""
    if spec is None:
        return default
    return spec if isinstance(spec, int) else spec.fileno()


def popen(args: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
          stdout: Any = None, stderr: Any = None) -> zygote.Child | None:
    """A forked ``subprocess.Popen(args, stdin=<closed>, ...)`` (stdout and stderr: None, a
    file or a descriptor), or None where it would not be the same as a fresh one."""
    args = [str(a) for a in args]
    full_env = dict(os.environ if env is None else env)
    forker = _forkable(args, full_env)
    if forker is None:
        return None
    module, rest = _module(args)
    request = {"module": module, "args": rest, "env": full_env,
               "cwd": os.path.abspath(cwd or os.getcwd()), "pool": forker.pool}
    with open(os.devnull, "rb") as empty:
        return zygote.Child(forker.path, request,
                            (empty.fileno(), _fd(stdout, 1), _fd(stderr, 2)), args)


def run(args: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None,
        timeout: float | None = None, capture_output: bool = False, text: bool = False,
        stdout: Any = None, stderr: Any = None, check: bool = False
        ) -> subprocess.CompletedProcess:
    """``subprocess.run(args, ...)``, forked from the zygote where that is the same (its
    standard input is empty)."""
    args = [str(a) for a in args]
    fresh = dict(capture_output=capture_output, stdout=stdout, stderr=stderr)
    if capture_output:
        stdout = stderr = subprocess.PIPE
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        out_spec = out if stdout == subprocess.PIPE else stdout
        err_spec = out_spec if stderr == subprocess.STDOUT else (
            err if stderr == subprocess.PIPE else stderr)
        child = popen(args, env=env, cwd=cwd, stdout=out_spec, stderr=err_spec)
        if child is None:
            return subprocess.run(args, cwd=cwd, env=env, timeout=timeout, text=text,
                                  check=check, stdin=subprocess.DEVNULL, **fresh)

        def read(handle: Any, spec: Any) -> Any:
            if spec != subprocess.PIPE:
                return None
            handle.seek(0)
            data = handle.read()
            return data.decode(errors="replace").replace("\r\n", "\n") if text else data

        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(args, timeout, read(out, stdout),
                                            read(err, stderr)) from None
        except BaseException:  # Ctrl-C: the child is killed, as subprocess.run's would be
            child.kill()
            raise
        done = subprocess.CompletedProcess(args, code, read(out, stdout), read(err, stderr))
    if check:
        done.check_returncode()
    return done


def on_path(folder: Path) -> Path:
    """The folder to put first on PATH for a shell's commands (a guide run as printed):
    ``folder``, with a ``python`` and a ``pytest`` that are this interpreter's, their runs
    (``python -m pytest``, ``python -m amp_conformance``, ``pytest``) forked from the zygote
    where that is the same as a fresh one (:func:`tests.zygote.shell`); this interpreter's
    own folder where nothing is forked."""
    bin_folder = Path(sys.executable).parent
    forker = _forkable([sys.executable, "-m", "pytest"], dict(os.environ))
    if forker is None:
        return bin_folder
    started = {k: v for k, v in forker.env.items() if k.startswith(zygote.AT_IMPORT)}
    for name, script in (("python", None), ("pytest", str(bin_folder / "pytest"))):
        shim = folder / name
        shim.write_text(
            f"#!{sys.executable} -IS\n"
            f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nimport zygote\n"
            f"zygote.shell({sys.executable!r}, {script!r}, {forker.path!r}, {forker.pool!r}, "
            f"{started!r})\n", encoding="utf-8")
        shim.chmod(0o755)
    return folder
