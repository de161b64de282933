"""docs/vendors.md: real out-of-tree autocast implementations, from their observed runs
(amp_conformance/tools/vendors_table.py, the nox session vendor(<name>))."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_conformance.core import generated
from amp_conformance.tools import vendors_table

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "vendors.md"
SUMMARY = ROOT / "docs" / "data" / "vendors-observed.json"


def _reports(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    results = [
        {"nodeid": "s.py::test_a[xla]", "outcome": "passed"},
        {"nodeid": "s.py::test_b[xla-1]", "outcome": "xfailed",
         "message": "torch_xla: kernel X is wrong (defects/x.py) [xfail.txt:3]\nRuntimeError: x"},
        {"nodeid": "s.py::test_b[xla-2]", "outcome": "xfailed",
         "message": "torch_xla: kernel X is wrong (defects/x.py) [xfail.txt:4]\nRuntimeError: x"},
        {"nodeid": "s.py::test_c[xla]", "outcome": "failed", "message": "RuntimeError: boom 3"},
        {"nodeid": "s.py::test_d[xla]", "outcome": "xfailed",
         "message": "known PyTorch defect: dynamo misses it\nAssertionError: y"},
    ]
    report = {"torch": "2.9.0", "run": {"status": "completed", "exitstatus": 1, "processes": 2},
              "summary": {"passed": 1, "failed": 1, "xfailed": 2, "skipped": 0},
              "results": results}
    (root / "xla.json").write_text(json.dumps(report))
    (root / "xla.meta.json").write_text(json.dumps({
        "backend": "PyTorch/XLA", "module": "torch_xla", "version": "2.9.0", "device": "xla",
        "command": "PJRT_DEVICE=CPU python -m amp_conformance run ...", "wall_s": 500,
        "coverage": "coverage xla: 66/70 covered, 0 reached but not checked, 4 excluded, 0 missing"}))
    return root


def test_a_run_becomes_a_row_its_departures_and_its_failures(tmp_path):
    summary = vendors_table.summarize(_reports(tmp_path))
    (backend,) = summary["backends"]
    assert backend["counts"]["xfailed"] == 2 and backend["counts"]["failed"] == 1
    assert backend["departures"] == [{"reason": "torch_xla: kernel X is wrong (defects/x.py)",
                                      "count": 2, "items": ["s.py::test_b[xla-1]",
                                                            "s.py::test_b[xla-2]"]}]
    text = vendors_table.markdown(summary)
    assert "| PyTorch/XLA (`torch_xla`) | 2.9.0 | 2.9.0 | xla | 1 | 1 | 2 | 0 |" in text
    assert "**2** × torch_xla: kernel X is wrong (defects/x.py)" in text
    assert "**1** × RuntimeError: boom N" in text
    assert backend["pytorch_defects"] == [{"reason": "known PyTorch defect: dynamo misses it",
                                           "count": 1, "items": ["s.py::test_d[xla]"]}]
    assert "PyTorch's own known defects met on this torch (1 item," in text


def test_the_command_line_writes_the_summary_and_the_document(tmp_path):
    reports = _reports(tmp_path / "r")
    doc = tmp_path / "vendors.md"
    doc.write_text(f"# Vendors\n\n{vendors_table.BEGIN}\n{vendors_table.END}\n")
    assert vendors_table.main(["--reports", str(reports), "--summary", str(tmp_path / "s.json"),
                               "--write", str(doc)]) == 0
    assert "PyTorch/XLA" in doc.read_text()
    assert vendors_table.main(["--reports", str(tmp_path / "none")]) == 2


def test_docs_vendors_md_is_what_the_committed_summary_makes():
    if not SUMMARY.is_file():
        pytest.fail("docs/data/vendors-observed.json is missing: run nox -t vendors, then "
                    "python -m amp_conformance.tools.vendors_table --reports reports/vendors "
                    "--summary docs/data/vendors-observed.json --write docs/vendors.md")
    summary = json.loads(SUMMARY.read_text())
    section = generated.section(DOC.read_text(), vendors_table.BEGIN, vendors_table.END)
    assert section == vendors_table.markdown(summary)
    # every folder of examples/vendors/ has its row (a new one: run nox -s "vendor(<name>)")
    assert [b["session"] for b in summary["backends"]] == sorted(
        p.parent.name for p in ROOT.glob("examples/vendors/*/integration.toml"))


def test_the_readme_points_to_the_vendors_table():
    assert "docs/vendors.md" in (ROOT / "README.md").read_text()


def test_one_backends_session_keeps_the_other_backends_rows(tmp_path):
    """``nox -s "vendor(ipex)"`` alone leaves only IPEX's reports: the committed summary's
    other rows stay, IPEX's is replaced."""
    committed = {"backends": [{"session": "ipex", "counts": {"passed": 1}},
                              {"session": "xla", "counts": {"passed": 2}}]}
    fresh = {"backends": [{"session": "ipex", "counts": {"passed": 3}}]}
    merged = vendors_table.merge(committed, fresh)
    assert [(b["session"], b["counts"]["passed"]) for b in merged["backends"]] == \
        [("ipex", 3), ("xla", 2)]


def test_the_excused_items_are_counted_per_mechanism_and_listed(tmp_path):
    """The report's ``excused`` (plugin/excuses.py) reaches the row and the section: its count
    and mechanisms in the verdict line's words, each item with its evidence; a report from
    before excuses were counted says so rather than reading as none excused."""
    root = _reports(tmp_path / "r")
    report = json.loads((root / "xla.json").read_text())
    report["excused"] = {"count": 3, "by_mechanism": {"limit": 2, "transform limit": 1}, "items": [
        {"nodeid": "s.py::test_t[xla-grad-torch_16]", "outcome": "passed",
         "mechanism": "transform limit", "evidence": ["geqrf: raises X too", "qr: departs too"]},
        {"nodeid": "s.py::test_e[xla-2]", "outcome": "skipped", "mechanism": "limit",
         "evidence": "run again with autocast disabled on xla, it fails the same way: E: no"},
        {"nodeid": "s.py::test_e[xla-1]", "outcome": "skipped", "mechanism": "limit",
         "evidence": "run again with autocast disabled on xla, it fails the same way: E: no"}]}
    (root / "xla.json").write_text(json.dumps(report))
    (backend,) = vendors_table.summarize(root)["backends"]
    assert backend["excused"]["count"] == 3
    assert backend["excused"]["by_mechanism"] == {"limit": 2, "transform limit": 1}
    text = vendors_table.markdown({"backends": [backend]})
    assert "| 1 | 1 | 2 | 0 | 3 (limits 2, transform limits 1) | completed" in text
    assert "Excused (3 items: limits 2, transform limits 1;" in text
    lines = text.splitlines()
    first = lines.index("- limit: `test_e[xla-1]` (skipped) — run again with autocast disabled "
                        "on xla, it fails the same way: E: no")
    assert lines[first + 2] == ("- transform limit: `test_t[xla-grad-torch_16]` (passed) — "
                                "2 entries: geqrf, qr")
    del report["excused"]
    (root / "xla.json").write_text(json.dumps(report))
    (backend,) = vendors_table.summarize(root)["backends"]
    assert backend["excused"] is None
    text = vendors_table.markdown({"backends": [backend]})
    assert "| 0 | — (not counted) | completed" in text and "Excused (" not in text
