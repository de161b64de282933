"""amp_conformance/tools/forked.py: a forked child runs pytest or the caller's function, its
exit status as subprocess reports it, and what the parent printed is printed once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from amp_conformance.tools import forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked children need os.fork")


def test_a_function_runs_in_a_child_and_its_status_comes_back(tmp_path):
    seen = tmp_path / "pid"

    def main() -> int:
        seen.write_text(str(os.getpid()))
        return 3

    child = forked.Forked([], main=main)
    assert child.wait() == 3 and int(seen.read_text()) == child.pid != os.getpid()


def test_a_child_killed_by_a_signal_says_which():
    child = forked.Forked([], main=lambda: os.kill(os.getpid(), signal.SIGKILL) or 0)
    assert child.wait() == -signal.SIGKILL


def test_what_the_parent_had_not_flushed_is_printed_once():
    script = ("import sys\nfrom amp_conformance.tools import forked\n"
              "print('before')\nforked.Forked([], main=lambda: 0).wait()\nprint('after')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe: buffered
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["before", "after"]
