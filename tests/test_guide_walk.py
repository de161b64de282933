"""docs/vendor-guide.md and docs/quickstart.md walked literally, from an empty folder, and
what they print compared with the record their figures come from (docs/data, for this
machine's CPU capability and torch; amp_conformance/tools/guide_walk.py).

In every run the vendor guide's first run is walked once, steps 0 and 2 to 7 as printed
(step 1, the environment, is this interpreter's), and read by each test of it: it reaches
a green declared run; its steps up to coverage (discover, the review's listing and
decisions, coverage) print the record's figures, and the items its first run collects
against the record's count: a change to the suite that adds or removes items fails here
until the guide is walked again. The figures of its two suite runs are compared where
``AMP_CONFORMANCE_WALK`` is set (``vendor`` or ``all``), and the quickstart (a fresh clone
and virtualenv, and the project's whole test run: minutes) is walked where it is
``quickstart`` or ``all``: the quickstart's test command is this test run itself.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tomllib

import pytest
import torch

from amp_conformance.tools import figures, guide_walk
from tests import children

WALK = os.environ.get("AMP_CONFORMANCE_WALK", "")
#: times, the machine and the commit: what two walks never share
UNCOMPARED = ("t.", "machine", "commit")


def _recorded(source: str) -> dict:
    """The record of this machine's CPU capability and torch, or skip naming what is missing."""
    here = guide_walk.machine()
    for record in figures.records(source):
        if (record["machine"]["capability"], record["machine"]["torch"]) == \
                (here["capability"], here["torch"]):
            return record
    pytest.skip(f"docs/data/{source} has no record for {here['capability']} and torch "
                f"{here['torch']}: record one with python -m amp_conformance.tools.guide_walk")


def _compared(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if not k.startswith(UNCOMPARED)}


needs_python_backend = pytest.mark.skipif(
    not hasattr(__import__("torch").library, "get_kernel"),
    reason="the example backend needs torch.library.get_kernel")


@pytest.fixture(scope="module")
def vendor_walk(tmp_path_factory) -> dict:
    """The vendor guide's first run, steps 0 and 2 to 7 as printed, walked once in an empty
    folder under ``bash -u`` (a variable the guide names and nobody set stops it), its
    ``python`` this interpreter (forking its runs from the tests' zygote)."""
    folder = tmp_path_factory.mktemp("vendor-guide")
    python = children.on_path(tmp_path_factory.mktemp("bin")) / "python"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHELLOPTS", "nounset")  # the walker's shell, as bash -u
        return {"walked": guide_walk.walk_vendor(folder, python=python), "work": folder / "work"}


def _step_by_step() -> str:
    """docs/vendor-guide.md's step-by-step, less step 1 (the environment: this test's own
    serves)."""
    text = (guide_walk.ROOT / "docs" / "vendor-guide.md").read_text(encoding="utf-8")
    section = text[text.index("## A first run, step by step"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    steps = re.split(r"(?m)^(?=# \d+\. )", block)
    return "".join(s for s in steps if not s.startswith("# 1. "))


@pytest.mark.slow
class TestVendorGuideWalk:
    """The tests that read the vendor guide's walk (one worker walks it, once)."""

    @pytest.mark.skipif(not hasattr(torch._C, "_acc"), reason="the example backend needs "
                        "torch._C._acc (a Python device guard)")
    def test_the_vendor_guide_step_by_step_reaches_a_green_declared_run(self, vendor_walk):
        """A vendor with the example backend, following the vendor guide alone, declares
        nothing by hand but the decisions the guide shows, and ends green."""
        script = _step_by_step()
        assert "review mydev.toml --accept" in script and "--draft-declarations declared" in script
        assert "review mydev.toml --keep" in script and "--accept '*'" not in script
        # as a person runs them: the first run fails (exit 1) and the next steps follow it
        steps = vendor_walk["walked"]["steps"]
        out = "\n".join(s["output"] for s in steps)
        assert [s["command"] for s in steps] == guide_walk.vendor_commands(False), out[-4000:]
        assert steps[-1]["rc"] == 0, out[-4000:]
        # every block discover wrote is decided, in groups: two kept with their expected
        # failures, the rest accepted (90 on torch 2.13; the count follows torch's lists)
        assert "in 7 groups" in out and "[lower/unchanged-values-differ]  1 entry" in out, out[:4000]
        assert "review: accepted 0, kept 2, 88 left to review" in out, out[-4000:]
        assert "review: 4 expected failures of the kept entries added to mydev-xfail.txt" in out
        assert "review: accepted 88, kept 0, 0 left to review" in out, out[-4000:]
        assert "refused to accept" not in out
        assert "amp-conformance run: drafted declared/capabilities.toml and declared/xfail.txt" in out
        capabilities = tomllib.loads((vendor_walk["work"] / "declared" / "capabilities.toml")
                                     .read_text())
        assert capabilities["capabilities"] == {"cast_cache": False, "sparse_grads": False}
        last = out.strip().splitlines()
        assert last[-1] == "amp-conformance run: completed, pytest exit status 0", out[-3000:]
        assert re.search(r"\d+ passed, \d+ skipped, \d+ xfailed", out), out[-3000:]
        assert " failed" not in last[-2]

    @needs_python_backend
    def test_the_vendor_guide_up_to_coverage_prints_its_figures(self, vendor_walk):
        """Steps 0 and 2 to 4 as printed: what they print is the record's."""
        recorded = _recorded(figures.VENDOR)
        first = next(c for c in guide_walk.vendor_commands(False)
                     if c.startswith("python -m amp_conformance run --report reports/draft.json"))
        upto = [c for c in guide_walk.vendor_commands(False)
                if not c.startswith(("python -m amp_conformance run", "sed -i 's/^#xfail"))]
        walked = {**vendor_walk["walked"], "steps": [
            s for s in vendor_walk["walked"]["steps"] if s["command"] in upto]}
        assert [s["rc"] for s in walked["steps"]] == [0] * len(upto), walked["steps"][-1]
        assert _compared(figures.vendor_review_values(walked)) == \
            _compared(figures.vendor_review_values(recorded))
        # the first run's items, collected as it would collect them (not run)
        args = shlex.split(first.split(" -- ", 1)[1])
        args = [a for i, a in enumerate(args) if a != "-n" and args[i - 1] != "-n"]
        collected = children.run(
            [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", *args, "--collect-only",
             "-p", "no:cacheprovider"],  # as run starts its child (-q is the guide's)
            cwd=vendor_walk["work"], env=guide_walk.clean_env(), capture_output=True, text=True,
            timeout=600)
        count = re.search(r"^(\d+) tests? collected", collected.stdout, re.M)
        summary = figures._last_summary(figures._step(recorded, first)["output"])
        assert count and int(count[1]) == sum(map(int, re.findall(
            r"(\d+) (?:passed|failed|skipped|xfailed|xpassed|errors?)\b", summary))), (
            f"the vendor guide's first run has {count and count[1]} items here, the record "
            f"({summary}) another count: walk it again (python -m amp_conformance.tools.guide_walk "
            "vendor --from-clone --record docs/data/vendor-guide.json, on each CPU capability) and "
            "python -m amp_conformance.tools.figures --write", collected.stdout[-2000:])
        listing = next(s for s in walked["steps"]
                       if s["command"] == "python -m amp_conformance review mydev.toml")
        page = (guide_walk.ROOT / "docs" / "vendor-guide.md").read_text(encoding="utf-8")
        block = figures.quoted_block(page, "[lower/unchanged-no-kernel]")
        assert block and figures._squash(block) in figures._squash(listing["output"])

    @needs_python_backend
    @pytest.mark.skipif(WALK not in ("vendor", "all"), reason="AMP_CONFORMANCE_WALK=vendor "
                        "compares the figures of the vendor guide's two suite runs too")
    def test_the_vendor_guide_walked_whole_prints_its_figures(self, vendor_walk):
        recorded = _recorded(figures.VENDOR)
        walked = guide_walk.record(vendor_walk["walked"], guide_walk.machine(), "here")
        assert _compared(figures.vendor_values(walked)) == _compared(figures.vendor_values(recorded))
        assert walked["reports"]["draft"]["failed"] == recorded["reports"]["draft"]["failed"]


@pytest.mark.skipif(WALK not in ("quickstart", "all"), reason="AMP_CONFORMANCE_WALK=quickstart "
                    "walks the quickstart from a fresh clone (the project's whole test run)")
def test_the_quickstart_walked_prints_its_figures(tmp_path):
    recorded = _recorded(figures.QUICK)
    walked = guide_walk.record(guide_walk.walk_quickstart(tmp_path), guide_walk.machine(),
                               "here")
    assert [s["rc"] for s in walked["steps"]] == [0] * len(walked["steps"]), walked["steps"]
    assert _compared(figures.quickstart_values(walked)) == \
        _compared(figures.quickstart_values(recorded))
