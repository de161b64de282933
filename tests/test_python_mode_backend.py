"""A backend of Python modes gets a verdict of its own departures, from discover to the
atlas (tests/backends/amp_pymode.py: a PrivateUse1 device run by a global dispatch mode over
host tensors, a function mode that cannot lower torch's dtype utilities, a partial op set).

The suite's bookkeeping must not go through those modes: its dtype arithmetic once died
inside the backend's function mode (discover's traceback, a quarter of a run's failures).
What may fail is the backend: conv2d, in its policy, has no convolution kernel there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from amp_conformance.core import casting
from tests import backends

OPLIST = backends.HERE / "amp_pymode.toml"
CAPABILITIES = backends.HERE / "amp_pymode_capabilities.toml"
PYMODE = ("--backend-module", "amp_pymode", "--device", "pymode")
CONV = "pymode cannot run aten::convolution (outside autocast too)"

needs_python_backends = pytest.mark.skipif(
    not hasattr(torch._C, "_acc"), reason="the backend needs torch._C._acc (a Python device "
    "guard, torch >= 2.5)")


def _run(tmp_path: Path, *args: str):
    return backends.run(*args, cwd=tmp_path)


class _CannotLower(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func is torch.promote_types:
            raise NotImplementedError("cannot lower torch.promote_types")
        return func(*args, **(kwargs or {}))


def test_the_suites_dtype_arithmetic_stays_out_of_a_function_mode():
    x, y = torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.bfloat16)
    with _CannotLower():
        assert casting.widest_eligible((x, y), "cpu") == torch.float32
        assert casting.promoted_floating([x, y]) == torch.float32


@pytest.mark.slow
@needs_python_backends
def test_discover_and_coverage_run_without_a_traceback(tmp_path):
    found = _run(tmp_path, "-m", "amp_conformance", "discover", *PYMODE, "--out", "draft.toml")
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr[-3000:]
    assert "entries of the cuda lists on pymode" in found.stdout.splitlines()[-1]
    covered = _run(tmp_path, "-m", "amp_conformance", "coverage", *PYMODE, "--oplist",
                   str(OPLIST), "-q")
    assert covered.returncode == 0, covered.stdout[-3000:] + covered.stderr[-3000:]
    assert covered.stdout.strip().splitlines()[-1] == (
        "coverage pymode: 9/9 covered, 0 reached but not checked, 0 excluded, 0 missing")


@pytest.mark.slow
@needs_python_backends
def test_the_supervised_run_names_only_the_backends_departures(tmp_path):
    proc = _run(tmp_path, "-m", "amp_conformance", "run", "--", *PYMODE, "--oplist", str(OPLIST),
                "--capabilities", str(CAPABILITIES), "-q", "-p", "no:cacheprovider",
                "--conformance-report", "r.json")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["status"] == "completed" and data["run"]["exitstatus"] == 1, out[-3000:]
    failed = [r for r in data["results"] if r["outcome"] == "failed"]
    assert failed and all(r["message"].startswith(CONV) for r in failed), [
        (r["nodeid"], r["message"][:200]) for r in failed if not r["message"].startswith(CONV)]
    assert {r["nodeid"].split("[")[1].rsplit("-", 1)[-1] for r in failed} == {"conv2d]"}
    assert [c["cause"] for c in data["causes"]["failures"]] == [CONV]
    passed = sum(r["outcome"] == "passed" for r in data["results"])
    assert passed > 200, passed


@pytest.mark.slow
@needs_python_backends
def test_compile_checks_say_why_nothing_compiles(tmp_path):
    proc = _run(tmp_path, "-m", "pytest", "--pyargs", "amp_conformance", *PYMODE, "--oplist",
                str(OPLIST), "-q", "-p", "no:cacheprovider", "-rs", "-k",
                "test_compile_region and outer_region")
    assert proc.returncode == 5, proc.stdout[-3000:]  # every item skipped: nothing proved
    assert ("dynamo compiles nothing here, it skips every frame while a torch dispatch mode "
            "is active (HostOps)") in proc.stdout


@pytest.mark.slow
@needs_python_backends
def test_a_run_stopped_by_maxfail_does_not_blame_xdist(tmp_path):
    """-x leaves items not run with no device lost: no word of worker restarts."""
    proc = _run(tmp_path, "-m", "pytest", "--pyargs", "amp_conformance", *PYMODE, "--oplist",
                str(OPLIST), "-q", "-p", "no:cacheprovider", "-x", "-k", "test_policy")
    assert proc.returncode == 1 and CONV in proc.stdout, proc.stdout[-3000:]
    assert "stopped replacing workers" not in proc.stdout


@pytest.mark.slow
@needs_python_backends
def test_the_opinfo_tier_and_the_atlas_judge_it(tmp_path):
    pytest.importorskip("expecttest", reason="op_db needs expecttest: pip install expecttest")
    tier = _run(tmp_path, "-m", "pytest", "--pyargs", "amp_conformance", *PYMODE, "--oplist",
                str(OPLIST), "--amp-opinfo", "-q", "-p", "no:cacheprovider", "-k",
                "test_opinfo and (-mm] or -matmul] or -nn.functional.conv2d] or -exp] or -cat])")
    assert tier.returncode == 0 and "Traceback" not in tier.stdout, tier.stdout[-3000:]
    atlas = _run(tmp_path, "-m", "amp_conformance", "atlas", "--devices", "pymode",
                 "--backend-module", "amp_pymode", "--oplist", str(OPLIST), "--ops",
                 "mm,nn.functional.conv2d,exp", "--json", "atlas.json")
    assert atlas.returncode == 0, atlas.stdout[-2000:] + atlas.stderr[-2000:]
    assert "atlas: 3 ops on pymode" in atlas.stdout + atlas.stderr
