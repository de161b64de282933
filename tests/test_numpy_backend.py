"""A backend of the real shape gets a verdict of its departures and names its limits once
(tests/backends/amp_npmode.py: tensors that wrap numpy arrays, an environment of modes
that exists only in the thread that entered it, a dispatch mode that refuses what it lacks
in its own words, no autograd through its ops, no sparse layout).

What may fail is the backend's departure alone: conv2d, in its policy, cannot run there.
Its limits are skips that say which limit and show the probe's evidence, counted once in
the report; none is a failure and none a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests import backends

OPLIST = backends.HERE / "amp_npmode.toml"
CAPABILITIES = backends.HERE / "amp_npmode_capabilities.toml"
NPMODE = ("--backend-module", "amp_npmode", "--device", "npmode")
CONV = "npmode cannot run aten::convolution (outside autocast too)"
LIMITS = {"autograd does not reach its tensors", "it has no sparse layout",
          "its ops do not run in other threads"}

pytestmark = pytest.mark.skipif(not hasattr(torch._C, "_acc"), reason="the backend needs "
                                "torch._C._acc (a Python device guard, torch >= 2.5)")


def _run(tmp_path: Path, *args: str):
    return backends.run(*args, cwd=tmp_path)


@pytest.mark.slow
def test_discover_writes_a_list_and_coverage_reads_it(tmp_path):
    found = _run(tmp_path, "-m", "amp_conformance", "discover", *NPMODE, "--out", "draft.toml")
    assert found.returncode == 0 and "Traceback" not in found.stderr, found.stderr[-3000:]
    assert "entries of the cuda lists on npmode" in found.stdout.splitlines()[-1]
    assert (tmp_path / "draft.toml").read_text().count("[[entry]]") > 100
    covered = _run(tmp_path, "-m", "amp_conformance", "coverage", *NPMODE, "--oplist",
                   str(OPLIST), "-q")
    assert covered.returncode == 0, covered.stdout[-3000:] + covered.stderr[-3000:]
    assert covered.stdout.strip().splitlines()[-1] == (
        "coverage npmode: 9/9 covered, 0 reached but not checked, 0 excluded, 0 missing")


@pytest.mark.slow
def test_the_supervised_run_fails_on_departures_and_names_each_limit_once(tmp_path):
    proc = _run(tmp_path, "-m", "amp_conformance", "run", "--draft-declarations", "declared",
                "--", *NPMODE, "--oplist", str(OPLIST), "--capabilities", str(CAPABILITIES),
                "-q", "-p", "no:cacheprovider", "--conformance-report", "r.json")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["run"]["status"] == "completed" and data["run"]["exitstatus"] == 1, out[-3000:]
    failed = [r for r in data["results"] if r["outcome"] == "failed"]
    assert [c["cause"] for c in data["causes"]["failures"]] == [CONV], [
        (r["nodeid"], r["message"][:200]) for r in failed if not r["message"].startswith(CONV)]
    limits = {row["cause"].split(" limit: ")[1]: row for row in data["causes"]["limits"]}
    assert set(limits) == LIMITS
    assert "(probe: (x * x).sum().backward() on a leaf tensor x of the device, then through " \
        "torch.nn.Linear(2, 2).to(device) raised RuntimeError: element 0 of tensors does not " \
        "require grad" in \
        limits["autograd does not reach its tensors"]["example"]
    assert "NotInEnvironment: npmode can only do math within the npmode environment" in \
        limits["its ops do not run in other threads"]["example"]
    assert "limits of npmode: autograd does not reach its tensors (" in proc.stdout
    drafted = (tmp_path / "declared" / "capabilities.toml").read_text()
    for name in ("autograd", "sparse_grads", "threads"):
        assert f"\n{name} = false  # " in drafted, drafted
    # declared, the limits' items skip without running, with the vendor's words
    again = _run(tmp_path, "-m", "pytest", "--pyargs", "amp_conformance", *NPMODE, "--oplist",
                 str(OPLIST), "--capabilities", "declared/capabilities.toml", "-q", "-rs",
                 "-p", "no:cacheprovider", "-k",
                 "test_threads or test_gradscaler_workflow or test_gradscaler_scale_outputs")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "device declares its ops run only in the thread that set it up (its ops do not " \
        "run in other threads (probe:" in again.stdout
    assert "passed, 13 skipped" in again.stdout


@pytest.mark.slow
def test_the_opinfo_tier_and_the_atlas_judge_it(tmp_path):
    pytest.importorskip("expecttest", reason="op_db needs expecttest: pip install expecttest")
    tier = _run(tmp_path, "-m", "pytest", "--pyargs", "amp_conformance", *NPMODE, "--oplist",
                str(OPLIST), "--amp-opinfo", "-q", "-p", "no:cacheprovider", "-k",
                "test_opinfo and (-mm] or -matmul] or -exp] or -cat])")
    assert tier.returncode == 0 and "Traceback" not in tier.stdout, tier.stdout[-3000:]
    atlas = _run(tmp_path, "-m", "amp_conformance", "atlas", "--devices", "npmode",
                 "--backend-module", "amp_npmode", "--oplist", str(OPLIST), "--ops",
                 "mm,nn.functional.conv2d,exp", "--json", "atlas.json")
    assert atlas.returncode == 0, atlas.stdout[-2000:] + atlas.stderr[-2000:]
    assert "atlas: 3 ops on npmode" in atlas.stdout + atlas.stderr
