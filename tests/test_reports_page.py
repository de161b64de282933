"""docs/reports.md names every file a run writes: a plain run's four
(tests/test_report_timing.py) and what a supervised run adds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import children

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_reports_page_names_every_file_a_supervised_run_writes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = children.run(
        [sys.executable, "-m", "amp_conformance", "run", f"--report={tmp_path / 'r.json'}", "--",
         "--device", "cpu", "-k", "test_policy and torch_16-mm", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("r."))
    assert written == ["r.html", "r.journal.jsonl", "r.json", "r.md", "r.quarantine.txt"]
    page = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    assert all(f"`PATH{name[1:]}`" in page for name in written), written
    assert "`PATH.1.json`" in page  # a restarted child's files (tests/test_run.py)
