"""Every figure README.md and docs/ print from a run names its source, and agrees with it
(amp_conformance/tools/figures.py): a record of docs/data the run wrote (the guide walks,
the suite-speed benchmark), a generated section, or docs/data/figure-sources.toml (the
commit that brought a past run's figure, the test that checks one, or why a number is no
run's)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from amp_conformance.tools import figures, guide_walk
from tests import children

ROOT = Path(__file__).resolve().parent.parent


def test_the_pages_print_the_recorded_figures():
    found = figures.problems()
    assert not found, ("the pages differ from the records in docs/data; regenerate them with "
                       "python -m amp_conformance.tools.figures --write\n  " + "\n  ".join(found))


def test_every_figure_of_the_pages_names_its_source():
    found = [u for page in figures.PAGES for u in figures.unnamed(page)]
    assert not found, (
        "figures no record, generated section or docs/data/figure-sources.toml names (record "
        "the run, or name the figure's source there):\n  " + "\n  ".join(found))


def test_each_named_source_stands_on_its_page():
    for entry in figures.sources():
        kinds = {"commit", "test", "not_a_run"} & set(entry)
        assert len(kinds) == 1, entry
        text = (ROOT / entry["page"]).read_text(encoding="utf-8")
        assert figures._spans(text, entry["text"]), (entry["page"], entry["text"][:80])
        assert figures.RUN_FIGURE.search(entry["text"]), ("names no figure", entry["text"][:80])
        if "test" in entry:
            path, _, name = entry["test"].partition("::")
            assert re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(
                encoding="utf-8"), re.M), entry["test"]


def _history() -> bool:
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "false"


def _added(commit: str) -> str:
    """The lines ``commit`` added, to any page (a figure may have come into a page it has
    moved from since)."""
    done = subprocess.run(["git", "show", "--format=", "--unified=0", commit],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return "\n".join(line[1:] for line in done.stdout.splitlines()
                     if line.startswith("+") and not line.startswith("+++"))


@pytest.mark.skipif(not _history(), reason="needs the repository's history (not a shallow clone)")
def test_a_past_runs_figures_came_with_the_commit_named():
    """A figure of a run that left no record came into its page with the commit named."""
    wrong = []
    for entry in (e for e in figures.sources() if "commit" in e):
        commits = entry["commit"] if isinstance(entry["commit"], list) else [entry["commit"]]
        added = re.sub(r"\s+", " ", " ".join(_added(c) for c in commits))
        wrong += [f"{entry['page']}: {m.group(0)!r} (commit {', '.join(commits)})"
                  for m in figures.RUN_FIGURE.finditer(re.sub(r"\s+", " ", entry["text"]))
                  if m.group(0) not in added]
    assert not wrong, "figures that the commit named did not add to the page:\n  " + \
        "\n  ".join(wrong)


def test_the_quoted_records_are_whole_runs():
    """The records the pages quote ran every step; the vendor guide's first run fails (its
    departures undeclared), every other step whose figures a page quotes succeeds."""
    vendor = figures.records(figures.VENDOR)[0]
    failing = [s["command"] for s in vendor["steps"] if s["rc"] != 0]
    assert failing == [figures._step(vendor, "python -m amp_conformance run --report "
                                     "reports/draft.json")["command"]], failing
    assert len(vendor["steps"]) == len(guide_walk.vendor_commands(vendor["environment"].startswith(
        "a fresh")))
    # the project's own test run is of the commit recorded, which other work may have left
    # half-done; its counts are quoted nowhere, its time is
    quick = figures.records(figures.QUICK)[0]
    failing = [s["command"] for s in quick["steps"] if s["rc"] != 0]
    assert set(failing) <= {"pytest -n 2"}, failing
    for record in (vendor, quick):
        assert set(record["machine"]) >= {"cpu", "capability", "cores", "torch"}


# -- the checker itself ------------------------------------------------------------------


def test_a_moved_figure_is_named_with_both_values():
    figure = figures.Figure("p.md", "ends `{a} failed, {b} passed` ({t} s)", "x.json",
                            lambda r: r)
    page = "the run ends `27 failed, 1255\n  passed` (22 s), then"
    assert figures.check(figure, page, {"a": "27", "b": "1255", "t": "22"}) == []
    assert figures.check(figure, page, {"a": "27", "b": "1254", "t": "22"}) == [
        "p.md: b is 1255 on the page, 1254 in docs/data/x.json"]
    assert figures.fill(figure, page, {"a": "3", "b": "4", "t": "5"}) == \
        "the run ends `3 failed, 4\n  passed` (5 s), then"


def test_a_commit_of_digits_replaces_one_with_letters():
    figure = figures.Figure("p.md", "printed at commit {commit}, on {machine}.", "x.json",
                            lambda r: r)
    page = "what they printed at commit 2dedfe9, on a host."
    assert figures.check(figure, page, {"commit": "2386494", "machine": "a host"}) == [
        "p.md: commit is 2dedfe9 on the page, 2386494 in docs/data/x.json"]
    assert figures.fill(figure, page, {"commit": "2386494", "machine": "a host"}) == \
        "what they printed at commit 2386494, on a host."


def test_an_unnamed_figure_is_found(tmp_path, monkeypatch):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "p.md").write_text(
        "Recorded: 12 passed in 3.5 s.\nA default of 600 s.\nAbout 2 minutes, 7/9 covered.\n"
        "Three checks, 40 entries.\n", encoding="utf-8")
    sources = tmp_path / "sources.toml"
    sources.write_text('[[figure]]\npage = "docs/p.md"\ntext = "A default of 600 s."\n'
                       'not_a_run = "an option\'s default"\n', encoding="utf-8")
    monkeypatch.setattr(figures, "SOURCES", sources)
    monkeypatch.setattr(figures, "sources", lambda path=sources: figures.tomllib.loads(
        sources.read_text(encoding="utf-8"))["figure"])
    assert figures.unnamed("docs/p.md", tmp_path) == [
        "docs/p.md:1: 12 passed", "docs/p.md:1: 3.5 s", "docs/p.md:3: 2 minutes",
        "docs/p.md:3: 7/9 covered"]



def test_the_suite_figures_count_todays_items(tmp_path):
    """The benchmark's record, which every page quoting the suite's time and counts reads,
    counts the items a collection of today's default CPU suite finds: a figure of another
    suite misleads as much as a typed one (re-record: benchmarks/suite_speed.py --record)."""
    import sys

    done = children.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", "--pyargs", "amp_conformance", "--device", "cpu"],
                          cwd=tmp_path, capture_output=True, text=True)
    found = re.search(r"^(\d+) tests? collected", done.stdout, re.M)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    speed = figures.speed_values(figures.records(figures.SPEED)[0])
    counted = sum(int(v) for k, v in speed.items() if k.startswith("suite."))
    assert int(speed["speed.items"]) == counted == int(found[1]), (
        f"docs/data/{figures.SPEED} counts {speed['speed.items']} items ({counted} by "
        f"outcome), a collection of the suite {found[1]}")


@pytest.mark.parametrize("walk, rcs, refused", [
    ("quickstart", [0, 1, 0], "'step 1' exited 1"), ("quickstart", [0, 0, 0], None),
    ("vendor", [0, 1, 0], None), ("vendor", [0, 0, 1], "'step 2' exited 1")])
def test_a_walk_whose_steps_failed_is_not_recorded(walk, rcs, refused):
    from amp_conformance.tools import guide_walk

    steps = [{"command": f"step {i}", "rc": rc} for i, rc in enumerate(rcs)]
    assert guide_walk.unrecordable({"walk": walk, "steps": steps}) == refused


@pytest.mark.parametrize("walk", ["quickstart", "vendor"])
def test_a_walk_not_recorded_shows_why(monkeypatch, tmp_path, capsys, walk):
    """The failing step's last lines are printed (the walk's folder is gone by then): for
    the vendor guide its last run, not its first, which fails by design."""
    from amp_conformance.tools import guide_walk

    steps = [{"command": "first run", "rc": 1, "seconds": 1.0, "output": "drafted, by design"},
             {"command": "pytest -n 2", "rc": 1, "seconds": 2.0,
              "output": "FAILED tests/test_x.py::test_y - AssertionError\n= 1 failed ="}]
    if walk == "quickstart":
        steps[0]["rc"] = 0
    walked = {"walk": walk, "page": "page.md", "environment": "here", "steps": steps}
    monkeypatch.setattr(guide_walk, "walk_quickstart", lambda folder: walked)
    monkeypatch.setattr(guide_walk, "walk_vendor", lambda folder, *args: walked)
    monkeypatch.setattr(guide_walk, "machine", lambda: {"cpu": "x"})
    monkeypatch.setattr(guide_walk, "commit", lambda working_tree=False: "abc1234")
    record = tmp_path / "walks.json"
    assert guide_walk.main([walk, "--record", str(record)]) == 1
    out = capsys.readouterr().out
    assert "FAILED tests/test_x.py::test_y - AssertionError" in out
    assert "--- the last lines of 'pytest -n 2' ---" in out and "lines of 'first run'" not in out
    assert "not recorded: 'pytest -n 2' exited 1" in out and not record.exists()
