"""Autocast kernels the suite cannot call never crash it (tests/backends/amp_foreign.py).

A backend may register Autocast kernels for ops of a library that is not loaded (no
schema: ``torch.ops`` cannot resolve them) or for ops of its own library that no op list
names. ``coverage`` lists each once, with why, and does not fail for them; every other item
runs as if they were not there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from amp_conformance.core import devices, dispatch
from amp_conformance.schema import oplist
from tests import backends

FOREIGN = ("amp_ghostlib::ghost_op", "aten::mm.amp_no_such_overload", "amp_foreignlib::scale")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return backends.run(*args, cwd=tmp_path)


@pytest.fixture
def ghost_kernel():
    """A kernel on AutocastCPU for an op no library defines, removed afterwards."""
    lib = torch.library.Library("amp_test_ghost", "IMPL")
    lib.impl("ghost_op", lambda *args: args[0], "AutocastCPU")
    yield "amp_test_ghost::ghost_op"
    lib._destroy()


def test_an_op_without_schema_is_foreign_not_policy(ghost_kernel):
    assert ghost_kernel in dispatch.registered_overloads("cpu")
    assert ghost_kernel not in dispatch.policy_overloads("cpu")
    why = dispatch.foreign_registrations("cpu")[ghost_kernel]
    assert why.startswith("no schema: a kernel was registered for it, but no library"), why
    assert "namespace 'amp_test_ghost'" in why
    assert dispatch.unresolvable("aten::mm") is None


def test_the_observer_installs_beside_a_ghost(ghost_kernel):
    """Kernel entry (every policy item's verdict) installs its observer over the policy."""
    with dispatch.Observer("cpu", dispatch.policy_overloads("cpu")) as observer:
        a = torch.randn(4, 4)
        with observer.recording() as seen, torch.autocast("cpu"):
            torch.mm(a, a)
    assert seen == ["aten::mm"]


def _excluded_here(device: str) -> int:
    """The exclusions of the device's lists that hold on this machine and torch (an
    overload only a probed feature runs is excluded where the probe finds it missing:
    aten::mkldnn_rnn_layer on a CPU with AVX2 only, docs/hardware.md)."""
    dtypes = devices.supported_amp_dtypes(device, False)
    return sum(x.applies(False, dtypes) for x in oplist.load(device).exclusions)


@pytest.mark.slow
def test_coverage_lists_each_foreign_kernel_once_and_passes(tmp_path):
    proc = _run(tmp_path, "-m", "amp_conformance", "coverage", "--device", "cpu",
                "--backend-module", "amp_foreign", "-q")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    out = proc.stdout
    assert out.strip().splitlines()[-1].endswith(
        f"0 reached but not checked, {_excluded_here('cpu')} excluded, 0 missing, 3 foreign "
        "(not checkable)"), out
    for name in FOREIGN:
        assert out.count(name) == 1, (name, out)
    assert "amp_ghostlib::ghost_op: no schema" in out
    assert ("amp_foreignlib::scale: an op of library 'amp_foreignlib', which no op list names"
            in out)


@pytest.mark.slow
def test_the_suite_runs_as_if_they_were_not_there(tmp_path):
    """Every policy item, kernel entry, coverage and the OpInfo tier's policy ops run green
    beside the foreign kernels; coverage says once which kernels it cannot check."""
    proc = _run(tmp_path, "-m", "pytest", "-p", "no:cacheprovider", "--pyargs",
                "amp_conformance", "--device", "cpu", "--backend-module", "amp_foreign",
                "--amp-dtype", "bfloat16", "-k", "test_policy or coverage or test_numerics",
                "-q", "-rw")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert " failed" not in proc.stdout and "error" not in proc.stdout.splitlines()[-1]
    assert "3 AutocastCPU kernels no op list can check" in proc.stdout
