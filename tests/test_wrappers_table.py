"""docs/wrappers.md's table of real libraries' autocast wrappers: the generator on made-up
reports, the committed table equal to what it makes from the committed summary, and the
wrapper sessions kept off the default run and CI (they download the libraries)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_conformance.core import generated
from amp_conformance.tools import wrappers_table as wt

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "wrappers.md"
SUMMARY = ROOT / "docs" / "data" / "wrappers-observed.json"
#: one session per folder of examples/wrappers/ (tests/test_integrations.py), each in the docs
SESSIONS = tuple(sorted(p.parent.name for p in ROOT.glob("examples/wrappers/*/integration.toml")))


def _result(test: str, param: str, outcome: str, message: str | None = None,
            check: str | None = None) -> dict:
    return {"nodeid": f"amp_conformance/suite/test_wrappers.py::{test}[{param}]", "test": test,
            "check": check or test.removeprefix("test_"), "param": param, "outcome": outcome,
            "message": message}


def _reports(tmp_path: Path) -> Path:
    root = tmp_path / "wrappers"
    root.mkdir()
    (root / "lib_a.meta.json").write_text(json.dumps({
        "library": "lib-a", "version": "1.2", "torch": "2.13.0+cpu",
        "wrappers": ["lib_a.ctx", "lib_a.ctx.nested"]}))
    (root / "lib_a.json").write_text(json.dumps({
        "torch": "2.13.0+cpu", "run": {"status": "completed"}, "results": [
            _result("test_wrapper_state", "cpu-lib_a.ctx-fp16", "failed",
                    "AssertionError: autocast off inside\nmore detail"),
            _result("test_wrapper_state", "cpu-lib_a.ctx-bf16", "passed"),
            _result("test_wrapper_state", "cpu-lib_a.ctx.nested-bf16", "passed"),
            _result("test_wrapper_unknown", "cpu-lib_a.ctx", "skipped", "not claimed | here"),
            _result("test_wrapper_nesting", "cpu-lib_a.ctx-fp16", "xfailed",
                    "departs from its docs: fp16 off on cpu"),
            _result("test_wrapper_nesting", "cpu-lib_a.ctx-bf16", "passed"),
            _result("test_policy", "cpu-bfloat16-torch_16-mm", "failed", "not a wrapper item"),
        ]}))
    (root / "lib_b.blocked.json").write_text(json.dumps({
        "library": "lib-b", "reason": "no torchaudio for this torch"}))
    return root


def test_summarize_reads_reports_meta_and_blocked_libraries(tmp_path):
    summary = wt.summarize(_reports(tmp_path))
    assert summary["source"] == "tier"
    assert [(lib["session"], lib["status"]) for lib in summary["libraries"]] == [
        ("lib_a", "completed"), ("lib_b", "blocked")]
    rows = summary["rows"]
    # the op-list item is not a wrapper's; the longest declared name wins
    assert [r["wrapper"] for r in rows] == ["lib_a.ctx", "lib_a.ctx", "lib_a.ctx.nested",
                                            "lib_a.ctx", "lib_a.ctx", "lib_a.ctx"]
    failed = rows[0]
    assert failed["message"] == "AssertionError: autocast off inside"
    assert failed["command"] == ("nox -s \"wrappers(lib_a)\" -- -k "
                                 "'test_wrapper_state[cpu-lib_a.ctx-fp16]'")
    assert rows[1]["message"] == ""  # a pass keeps no message


def test_table_has_a_row_per_library_wrapper_and_check(tmp_path):
    lines = wt.table(wt.summarize(_reports(tmp_path)))
    assert lines[0] == ("| library | version | device | wrapper | check | result | whose | "
                        "reproduction |")
    body = lines[2:]
    # a departure declared as a strict expected failure is shown as one, never as passed
    assert body[0].startswith("| lib-a | 1.2 | cpu | `lib_a.ctx` | wrapper_nesting | **departs (strict "
                              "expected failure)**: 1 of 2 | library | departs from its docs: "
                              "fp16 off on cpu (`cpu-lib_a.ctx-fp16`)")
    assert body[1].startswith("| lib-a | 1.2 | cpu | `lib_a.ctx` | wrapper_state | **failed**: 1 of 2 | "
                              "unexplained | AssertionError: autocast off inside (`cpu-lib_a.ctx-fp16`); "
                              "`nox -s \"wrappers(lib_a)\" -- -k")
    assert body[2] == ("| lib-a | 1.2 | cpu | `lib_a.ctx` | wrapper_unknown | skipped (1) | — | "
                       "not claimed \\| here |")
    assert body[3] == ("| lib-a | 1.2 | cpu | `lib_a.ctx.nested` | wrapper_state | passed (1) | "
                       "— |  |")
    assert body[4] == ("| lib-b | — | — | — | — | **blocked** | — | no torchaudio for this torch; "
                       "`nox -s \"wrappers(lib_b)\"` |")
    assert len(body) == 5


def _fake_run(root: Path) -> None:
    (root / "lib_a.cuda-fake.json").write_text(json.dumps({
        "torch": "2.13.0+cpu", "device": "cuda", "fake": True, "run": {"status": "completed"},
        "results": [
            _result("test_wrapper_state", "cuda-lib_a.ctx-bf16", "passed"),
            _result("test_wrapper_unknown", "cuda-lib_a.ctx", "skipped",
                    "not applicable: on cuda\nnot yet observed"),
            _result("test_wrapper_float32", "cuda-lib_a.ctx", "failed", "off on cuda"),
        ]}))


def test_a_fake_cuda_run_of_a_library_is_kept_apart_by_its_device(tmp_path):
    root = _reports(tmp_path)
    _fake_run(root)
    summary = wt.summarize(root)
    assert [(lib["session"], lib.get("device")) for lib in summary["libraries"]] == [
        ("lib_a", "cpu"), ("lib_a", "cuda (fake)"), ("lib_b", None)]
    fake = [r for r in summary["rows"] if r["device"] == "cuda (fake)"]
    assert [r["check"] for r in fake] == ["wrapper_state", "wrapper_unknown", "wrapper_float32"]
    assert fake[1]["message"] == "not applicable: on cuda not yet observed"  # whole
    assert fake[2]["command"] == ("nox -s \"wrappers(lib_a)\" -- --device cuda --fake -k "
                                  "'test_wrapper_float32[cuda-lib_a.ctx]'")
    body = wt.table(summary)[2:]
    assert body[4] == ("| lib-a | 1.2 | cuda (fake) | `lib_a.ctx` | wrapper_float32 | "
                       "**failed**: 1 of 1 | unexplained | off on cuda (`cuda-lib_a.ctx`); "
                       "`nox -s \"wrappers(lib_a)\" -- --device cuda --fake -k "
                       "'test_wrapper_float32[cuda-lib_a.ctx]'` |")


def test_a_session_run_alone_keeps_the_committed_rows_of_the_others(tmp_path):
    root = _reports(tmp_path)
    committed = wt.summarize(root)
    alone = tmp_path / "alone"
    alone.mkdir()
    _fake_run(alone)
    (alone / "lib_a.meta.json").write_text((root / "lib_a.meta.json").read_text())
    assert [lib["device"] for lib in wt.summarize(alone)["libraries"]] == ["cuda (fake)"]
    merged = wt.merge(committed, wt.summarize(alone))
    assert sorted((lib["session"], lib.get("device")) for lib in merged["libraries"]) == [
        ("lib_a", "cpu"), ("lib_a", "cuda (fake)"), ("lib_b", None)]
    assert len(merged["rows"]) == len(committed["rows"]) + 3
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(committed))
    assert wt.main(["--reports", str(alone), "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["libraries"] == merged["libraries"]


def test_markdown_marks_a_summary_not_made_by_the_tier():
    summary = {"source": "observe.py", "libraries": [
        {"session": "x", "library": "x", "version": "1", "torch": "2.13.0+cpu",
         "status": "completed"}], "rows": []}
    text = wt.markdown(summary)
    assert text.startswith("> **Observed directly, not by the wrapper tier** (observe.py)")
    assert "| x | 1 | cpu | — | — | **no wrapper results** (completed) | — |" in text
    assert "Observed directly" not in wt.markdown({**summary, "source": "tier"})


def test_write_replaces_only_the_marked_section(tmp_path, capsys):
    root = _reports(tmp_path)
    doc = tmp_path / "wrappers.md"
    doc.write_text(f"# title\n\n{wt.BEGIN}\nold\n{wt.END}\n\ntail\n")
    out = tmp_path / "summary.json"
    assert wt.main(["--reports", str(root), "--summary", str(out), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# title\n") and text.endswith("tail\n") and "old" not in text
    assert generated.section(text, wt.BEGIN, wt.END) == wt.markdown(json.loads(out.read_text()))
    assert wt.main(["--summary", str(out), "--write", str(doc)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("up to date")
    assert wt.main(["--reports", str(tmp_path / "none")]) == 2


def test_docs_table_is_what_the_generator_makes_from_the_committed_summary():
    summary = json.loads(SUMMARY.read_text(encoding="utf-8"))
    section = generated.section(DOC.read_text(encoding="utf-8"), wt.BEGIN, wt.END)
    assert section == wt.markdown(summary), (
        "docs/wrappers.md is stale: python -m amp_conformance.tools.wrappers_table "
        "--summary docs/data/wrappers-observed.json --write docs/wrappers.md")
    libraries = {lib["session"] for lib in summary["libraries"]}
    assert libraries == set(SESSIONS)
    assert all(lib["status"] == "completed" for lib in summary["libraries"])


def test_wrapper_sessions_are_off_the_default_run_and_ci():
    pytest.importorskip("nox", reason="nox is a dev dependency (pip install -e '.[dev]')")
    from tests.test_workflow import load_noxfile

    noxfile = load_noxfile()
    assert set(noxfile.WRAPPER_LIBRARIES) == set(SESSIONS)
    assert not [s for s in noxfile.nox.options.sessions if s.startswith("wrappers")]
    for library, spec in noxfile.WRAPPER_LIBRARIES.items():
        module = spec["declaration"].partition(":")[0]
        assert (ROOT / "examples" / "wrappers" / library / f"{module}.py").is_file()
        assert noxfile.wrapper_requirements(library)[-1] == \
            f"torch=={noxfile.wrapper_torch(library)}"
        assert f"{module}:WRAPPERS" in noxfile.wrapper_command(library)
    assert "torchaudio==2.11.*" in noxfile.wrapper_requirements("speechbrain")
    assert noxfile.wrapper_torch("speechbrain") == "2.11.0"
    assert noxfile.wrapper_requirements("open_clip")[-1] == "torch==2.13.0"
    assert "--xfail-file=examples/wrappers/accelerate/xfail.txt" in \
        noxfile.wrapper_command("accelerate")
    assert not any(a.startswith("--xfail-file=") for a in noxfile.wrapper_command("open_clip"))
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "wrappers" not in ci and "examples/wrappers" not in ci


_COUNTS = {"twenty": 20, "twenty-one": 21, "twenty-two": 22, "twenty-three": 23,
           "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}


def test_the_pages_counts_of_libraries_are_the_tables():
    """The words that count libraries in docs/wrappers.md's prose: the declared folders, and
    the libraries with fake cuda rows in the generated table."""
    text = DOC.read_text(encoding="utf-8")
    declared = _COUNTS[text.split("The declarations of ")[1].split()[0]]
    assert declared == len(SESSIONS)
    fake = _COUNTS[text.split("(`cuda (fake)` rows): ")[1].split()[0]]
    table = generated.section(text, wt.BEGIN, wt.END)
    assert fake == len({row.split("|")[1].strip() for row in table.splitlines()
                        if "| cuda (fake) |" in row})
