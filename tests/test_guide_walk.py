"""docs/vendor-guide.md and docs/quickstart.md walked literally, from an empty folder, and
what they print compared with the record their figures come from (docs/data, for this
machine's CPU capability and torch; amp_conformance/tools/guide_walk.py).

In every run: the vendor guide's steps up to coverage (discover, the review's listing and
decisions, coverage), compared figure by figure, and the items its first run collects
(not run) against the record's count: a change to the suite that adds or removes items
fails here until the guide is walked again. Its two suite runs (about a
minute on two cores) and the quickstart (a fresh clone and virtualenv, and the project's
whole test run: minutes) are walked where ``AMP_CONFORMANCE_WALK`` is set (``vendor``,
``quickstart`` or ``all``): they would double the suite runs the project's tests already
make (the example backend's whole run is test_vendor_workflow's), and the quickstart's test
command is this test run itself.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from amp_conformance.tools import figures, guide_walk

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


@needs_python_backend
def test_the_vendor_guide_up_to_coverage_prints_its_figures(tmp_path, monkeypatch):
    """Steps 0 and 2 to 4 as printed: what they print is the record's."""
    recorded = _recorded(figures.VENDOR)
    first = next(c for c in guide_walk.vendor_commands(False)
                 if c.startswith("python -m amp_conformance run --report reports/draft.json"))
    upto = [c for c in guide_walk.vendor_commands(False)
            if not c.startswith(("python -m amp_conformance run", "sed -i 's/^#xfail"))]
    monkeypatch.setattr(guide_walk, "vendor_commands", lambda environment: upto)
    walked = guide_walk.walk_vendor(tmp_path)
    assert [s["rc"] for s in walked["steps"]] == [0] * len(upto), walked["steps"][-1]
    assert _compared(figures.vendor_review_values(walked)) == \
        _compared(figures.vendor_review_values(recorded))
    # the first run's items, collected as it would collect them (not run)
    args = shlex.split(first.split(" -- ", 1)[1])
    args = [a for i, a in enumerate(args) if a != "-n" and args[i - 1] != "-n"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", *args, "--collect-only",
         "-p", "no:cacheprovider"],  # as run starts its child (-q is the guide's)
        cwd=tmp_path / "work", env=guide_walk.clean_env(), capture_output=True, text=True,
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
@pytest.mark.skipif(WALK not in ("vendor", "all"), reason="AMP_CONFORMANCE_WALK=vendor walks "
                    "the vendor guide's two suite runs too (about a minute on two cores)")
def test_the_vendor_guide_walked_whole_prints_its_figures(tmp_path):
    recorded = _recorded(figures.VENDOR)
    walked = guide_walk.record(guide_walk.walk_vendor(tmp_path), guide_walk.machine(), "here")
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
