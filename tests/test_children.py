"""tests/children.py: a forked child is what a fresh ``python -m pytest`` would be (its
folder first on sys.path, its PYTHONPATH, its environment and exit status), its xdist
workers hash with seeds of their own, a timeout kills it, and what a fresh interpreter would read
differently is never forked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import children

#: a conftest that says where it runs (its parent: the zygote, or this process)
PROBE = """
import json, os, sys
with open(os.environ["PROBE_OUT"] + os.environ.get("PYTEST_XDIST_WORKER", ""), "w") as f:
    json.dump({"pid": os.getpid(), "ppid": os.getppid(), "path0": sys.path[0], "cwd": os.getcwd(),
               "extra": os.environ.get("PROBE_EXTRA"), "hash": hash("amp-conformance"),
               "path": sys.path[:3]}, f)
"""


def _probe(tmp_path, *args: str, env: dict[str, str] | None = None, **kwargs):
    (tmp_path / "conftest.py").write_text(PROBE)
    (tmp_path / "test_it.py").write_text("import time\n\ndef test_it():\n"
                                         "    time.sleep(float(__import__('os').environ.get("
                                         "'PROBE_SLEEP', '0')))\n    assert "
                                         "__import__('os').environ.get('PROBE_FAIL') is None\n")
    out = tmp_path / "probe.json"
    # no plugin loaded (torch's import is not what is tested): a fresh child is cheap too
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {}), "PROBE_OUT": str(out)}
    done = children.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                        cwd=tmp_path, env=full, capture_output=True, text=True, **kwargs)
    assert out.exists(), (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done, json.loads(out.read_text())


forks = pytest.mark.skipif(
    not hasattr(os, "fork") or os.environ.get("AMP_CONFORMANCE_FORK") == "0",
    reason="children are forked only where os.fork exists and AMP_CONFORMANCE_FORK is not 0")


class TestForked:
    @forks
    def test_a_child_is_forked_with_its_folder_environment_and_status(self, tmp_path):
        done, seen = _probe(tmp_path, env={"PROBE_EXTRA": "yes"})
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
        assert seen["ppid"] == children._zygote.process.pid
        assert seen["path0"] == seen["cwd"] == str(tmp_path) and seen["extra"] == "yes"
        failed, _ = _probe(tmp_path, env={"PROBE_FAIL": "1"})
        assert failed.returncode == 1 and "1 failed" in failed.stdout

    @forks
    @pytest.mark.skipif("PYTHONHASHSEED" in os.environ, reason="with PYTHONHASHSEED set every "
                        "fresh worker would hash with the same seed")
    def test_a_forked_childs_xdist_workers_hash_with_seeds_of_their_own(self, tmp_path):
        """Forked from the pool, one zygote each: workers sharing a hash seed would hide
        what the checks of an order stable across workers catch."""
        done, seen = _probe(tmp_path, "-p", "xdist", "-n", "2")
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
        workers = [json.loads((tmp_path / f"probe.jsongw{i}").read_text()) for i in (0, 1)]
        pool = {p.pid for p in children._zygote.processes[1:]}
        assert seen["ppid"] == children._zygote.process.pid
        assert {w["ppid"] for w in workers} == pool and len(pool) == children.POOL == 2
        assert len({seen["hash"], *(w["hash"] for w in workers)}) == 3
        assert all(w["cwd"] == str(tmp_path) for w in workers)

    @forks
    @pytest.mark.skipif("PYTHONHASHSEED" in os.environ, reason="with PYTHONHASHSEED set every "
                        "fresh worker would hash with the same seed")
    def test_workers_beyond_the_pool_start_fresh(self, tmp_path):
        done, seen = _probe(tmp_path, "-p", "xdist", "-n", "3")
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
        parents = sorted(json.loads((tmp_path / f"probe.jsongw{i}").read_text())["ppid"]
                         for i in (0, 1, 2))
        pool = sorted(p.pid for p in children._zygote.processes[1:])
        assert parents == sorted([*pool, seen["pid"]])  # the third: the controller's child

    @forks
    def test_a_timeout_kills_the_child(self, tmp_path):
        began = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            _probe(tmp_path, env={"PROBE_SLEEP": "60"}, timeout=3)
        assert time.monotonic() - began < 30

    @pytest.mark.parametrize("env", [{"TORCH_LOGS": "+dynamo"}, {"PYTHONWARNINGS": "error"}],
                             ids=["torch", "python"])
    def test_what_an_import_reads_differently_is_a_fresh_process(self, tmp_path, env):
        _, seen = _probe(tmp_path, "-p", "no:warnings", env=env)
        assert seen["ppid"] == os.getpid()

    def test_a_sitecustomize_on_the_path_is_a_fresh_process(self, tmp_path):
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("import os\nos.environ['PROBE_EXTRA'] = 'site'\n")
        path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        _, seen = _probe(tmp_path, env={"PYTHONPATH": path})
        assert seen["ppid"] == os.getpid() and seen["extra"] == "site"


class _Ended:
    """A worker whose zygote ended before it: its exit status is lost."""

    def poll(self):
        raise ChildProcessError("the zygote ended")


class _Running:
    def poll(self):
        return None


def test_a_worker_is_forked_from_a_zygote_no_running_worker_came_from():
    from tests import zygote

    pool = ["a", "b"]
    assert zygote._free(pool, {}) == "a"
    assert zygote._free(pool, {"a": _Running()}) == "b"
    assert zygote._free(pool, {"a": _Running(), "b": _Ended()}) is None  # fresh, then
    assert zygote._free(pool, {"a": _Running(), "b": _Running()}) is None


@forks
def test_a_shells_python_and_pytest_are_forked_where_a_fresh_one_would_be_the_same(tmp_path):
    """tests/children.on_path: ``pytest`` forked as its console script runs (its folder
    first on sys.path), ``python -m pytest`` as ``-m`` runs (the working folder first), any
    other ``python`` the interpreter itself; each exits as the child did."""
    (tmp_path / "bin").mkdir()
    folder = children.on_path(tmp_path / "bin")
    (tmp_path / "conftest.py").write_text(PROBE)
    (tmp_path / "test_it.py").write_text("def test_it():\n    assert False\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PROBE_OUT": str(tmp_path / "probe.json"),
           "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}
    seen = {}
    for command in ("pytest -q -p no:cacheprovider", "python -m pytest -q -p no:cacheprovider"):
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
        seen[command.split()[0]] = json.loads((tmp_path / "probe.json").read_text())
    assert seen["pytest"]["ppid"] == seen["python"]["ppid"] == children._zygote.process.pid
    scripts = str(Path(sys.executable).parent)  # the console script's folder, as run fresh
    assert scripts in seen["pytest"]["path"] and scripts not in seen["python"]["path"]
    other = subprocess.run(["bash", "-c", "python -c 'import os, sys; print(sys.executable)'"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == sys.executable


def test_the_zygotes_code_is_what_a_child_would_compile_or_rewrite(tmp_path):
    """Where no bytecode is written, a child takes its code from the zygote: what the
    import system's compile and pytest's rewrite give for the same file, and a file that
    changed since is compiled and rewritten again."""
    from _pytest.assertion import rewrite

    from amp_conformance.plugin import verdict
    from tests import zygote

    path = verdict.__file__
    plain, rewritten = zygote.compiled([path])
    data = Path(path).read_bytes()
    assert plain[path][1] == compile(data, path, "exec", dont_inherit=True)
    assert rewritten[path][1] == rewrite._rewrite_test(Path(path), None)[1]
    calls = []
    cached = zygote.cached_rewrite(rewritten, lambda fn, config: calls.append(fn) or ("h", "new"))
    assert cached(Path(path), None)[1] is rewritten[path][1] and not calls
    changed = tmp_path / "verdict.py"
    changed.write_bytes(data + b"\n")
    assert zygote.cached_rewrite({str(changed): rewritten[path]}, lambda fn, config: (
        calls.append(fn) or ("h", "new")))(changed, None) == ("h", "new") and calls == [changed]
    source_to_code = zygote.cached_compile(plain, lambda self, data, path, _optimize=-1: "new")
    assert source_to_code(None, data, path) is plain[path][1]
    assert source_to_code(None, data + b"\n", path) == "new"


def test_the_test_process_compiles_once_for_its_zygotes(tmp_path, monkeypatch):
    """The checkout's code is compiled by the test process and read by each zygote from
    the file it names on the zygote's first line of input: the same code, compiled once."""
    import marshal

    from tests import zygote

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    shared = str(tmp_path / "compiled.marshal")
    assert zygote.write_compiled(shared)
    plain, rewritten = marshal.loads(Path(shared).read_bytes())
    path = str(Path(zygote.__file__).parent.parent / "amp_conformance" / "plugin" / "verdict.py")
    data = Path(path).read_bytes()
    assert plain[path] == (data, compile(data, path, "exec", dont_inherit=True))
    assert path in rewritten and not Path(shared + ".part").exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert not zygote.write_compiled(str(tmp_path / "none"))
    if children._zygote is not None and children._zygote.ready and sys.flags.dont_write_bytecode:
        assert os.path.exists(os.path.join(children._zygote.folder, "compiled.marshal"))


def test_a_rewrite_that_warns_is_left_to_the_child(tmp_path):
    warns = tmp_path / "test_warns.py"
    warns.write_text("def test_it():\n    assert (1, 'always true')\n")
    plain, rewritten = __import__("tests.zygote", fromlist=["compiled"]).compiled([str(warns)])
    assert str(warns) not in plain and str(warns) not in rewritten
