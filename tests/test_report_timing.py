"""Where a run's time went, in every report: each item's own time, per check family and per
tier its items and their time, the run's wall time (docs/report-schema.md); and
benchmarks/compare_reports.py, which compares two reports by them."""

from __future__ import annotations

import html
import importlib
import json
import sys
from pathlib import Path

import pytest

from amp_conformance.plugin.report import journal, render
from tests import children

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _events() -> list[dict]:
    """A run of three items (two policy items, one compiled-tier item) whose phases took
    known times, from 100.0 s to 112.5 s."""
    events = [{"event": "session", "time": 100.0, "device": "cpu"}]
    phases = {"test_policy[a]": ("policy", (0.25, 1.5, 0.25)),
              "test_policy[b]": ("policy", (0.0, 0.5, 0.0)),
              "test_compiled_policy[a]": ("compiled_policy", (0.0, 4.0, 0.0))}
    for name, (check, durations) in phases.items():
        nodeid = f"suite/test_x.py::{name}"
        events.append({"event": "start", "nodeid": nodeid})
        for when, duration in zip(("setup", "call", "teardown"), durations, strict=True):
            events.append({"event": "report", "nodeid": nodeid, "when": when,
                           "duration": duration, "category": "passed" if when == "call" else "",
                           "item": {"check": check, "nodeid": nodeid}})
        events.append({"event": "finish", "nodeid": nodeid})
    events.append({"event": "end", "time": 112.5, "exitstatus": 0})
    return events


def _report(events: list[dict]) -> dict:
    acc = journal.Accumulator()
    for event in events:
        acc.feed(event)
    return journal.build_report(acc)


def test_an_items_time_is_its_phases_and_families_and_tiers_sum_them():
    data = _report(_events())
    seconds = {r["nodeid"].split("::")[1]: r["seconds"] for r in data["results"]}
    assert seconds == {"test_policy[a]": 2.0, "test_policy[b]": 0.5,
                       "test_compiled_policy[a]": 4.0}
    assert data["families"]["policy"]["items"] == 2 and data["families"]["policy"]["seconds"] == 2.5
    assert data["families"]["compiled_policy"]["seconds"] == 4.0
    assert data["tiers"] == {
        "default": {"option": None, "items": 2, "seconds": 2.5},
        "compiled_policy": {"option": "--amp-compile", "items": 1, "seconds": 4.0}}
    assert data["run"]["wall"] == 12.5
    assert "time" not in data  # the session's clock is no field of the run's description


def test_a_run_that_did_not_end_is_timed_to_its_last_event_and_an_old_journal_not_at_all():
    events = _events()[:-1]
    events[-1]["time"] = 105.0  # e.g. a rebuilt crash: the last timed event
    assert _report(events)["run"]["wall"] == 5.0
    untimed = [{k: v for k, v in e.items() if k not in ("time", "duration")} for e in _events()]
    data = _report(untimed)  # a journal written before the timings
    assert data["run"]["wall"] is None and data["families"]["policy"]["seconds"] == 0.0


def test_the_pages_show_each_familys_items_and_time_and_the_tiers():
    data = _report(_events())
    markdown = render.render_markdown(data)
    assert "| check family | passed | failed | errors | xfailed | skipped | pass rate | items | time |" \
        in markdown
    assert "| policy | 2 | 0 | 0 | 0 | 0 | 100.0% | 2 | 2.5 s |" in markdown
    line = ("Wall 12.5 s; the items' own time (setup, call and teardown, summed over workers) by "
            "tier: default 2 items, 2.5 s · compiled_policy 1 items, 4.0 s (--amp-compile)")
    assert line in markdown
    page = render.render_html(data)
    assert '<td class="num">2</td><td class="num">2.5 s</td>' in page and html.escape(line) in page


@pytest.mark.slow
def test_a_real_run_times_its_families(tmp_path):
    out = tmp_path / "r.json"
    done = children.run([sys.executable, "-m", "pytest", "--pyargs", "amp_conformance.suite",
                           "--device", "cpu", "-q", "-p", "no:cacheprovider", "-k",
                           "test_regions or test_eligibility", f"--conformance-report={out}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(out.read_text())
    families = data["families"]
    assert set(families) == {"regions", "eligibility"}
    assert all(row["seconds"] > 0 and row["items"] > 0 for row in families.values())
    assert sum(r["items"] for r in families.values()) == len(data["results"])
    total = sum(r["seconds"] for r in data["results"])
    assert data["tiers"]["default"]["seconds"] == pytest.approx(total, abs=1e-2)
    assert 0 < total <= data["run"]["wall"]
    written = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("r."))
    assert written == ["r.html", "r.journal.jsonl", "r.json", "r.md"]
    page = (Path(__file__).resolve().parent.parent / "docs" / "reports.md").read_text()
    assert "writes four files" in page  # docs/reports.md names every file a report writes
    assert all(f"`PATH{name[1:]}`" in page for name in written)


@pytest.fixture
def compare_reports(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("compare_reports")


def test_two_reports_compare_by_tier_family_and_item(compare_reports, tmp_path, capsys):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(_report(_events())))
    faster = _events()
    for event in faster:
        if event.get("when") == "call" and "compiled" in event["nodeid"]:
            event["duration"] = 1.0
    after.write_text(json.dumps(_report(faster)))
    assert compare_reports.main([str(before), str(after), "--items", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Wall: before 12.50 s, after 12.50 s")
    assert "| compiled_policy | 1/1 | 4.00 | 1.00 | -3.00 | 0.25 |" in out
    assert "| policy | 2/2 | 2.50 | 2.50 | +0.00 | 1.00 |" in out
    assert out[-2:] == ["| `test_policy[a]` | 2.00 | 2.00 |", "| `test_compiled_policy[a]` | 4.00 | 1.00 |"]


def test_a_report_without_timings_is_refused_saying_why(compare_reports, tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"families": {}, "results": []}))
    with pytest.raises(SystemExit, match="has no timings"):
        compare_reports.main([str(old)])


def test_a_restarted_runs_wall_spans_its_processes():
    events = _events()
    first, second = journal.Accumulator(), journal.Accumulator()
    for event in events[:6]:  # the first process died during its second item
        first.feed(event)
    for event in [{**events[0], "time": 200.0}, *events[9:]]:  # a fresh one ran the rest
        second.feed(event)
    data = journal.merge([(first, "killed by SIGSEGV"), (second, "exit status 0")])
    assert data["run"]["processes"] == 2 and data["run"]["wall"] == 12.5
