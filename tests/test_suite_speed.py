"""benchmarks/suite_speed.py's verdicts on its runs: a figure is recorded only from a quiet
machine, and a before/after (``--against``) shows a change only where every pair agrees."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def suite_speed(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("suite_speed")


def test_a_change_shows_only_where_every_pair_agrees(suite_speed):
    assert suite_speed.paired([0.91, 0.95, 0.97]).endswith("faster in every pair")
    assert suite_speed.paired([1.02, 1.10]).endswith("slower in every pair")
    assert suite_speed.paired([0.88, 1.05]) == "pairs 0.88 to 1.05: no difference shown (the pairs disagree)"
    assert "one pair shows no difference" in suite_speed.paired([0.5])


def test_runs_on_a_busy_machine_or_far_apart_are_no_figure(suite_speed):
    quiet = {"serial": [(10, 20.0, "", 0.01), (10, 20.5, "", 0.02)]}
    assert suite_speed.unquiet(quiet) == []
    busy = {"serial": [(10, 20.0, "", 0.30), (10, 20.5, "", 0.02)]}
    assert "other processes took 30% of the cores" in suite_speed.unquiet(busy)[0]
    apart = {"serial": [(10, 20.0, "", 0.01), (10, 23.0, "", 0.01)]}
    assert "the two best runs differ by 15%" in suite_speed.unquiet(apart)[0]
    assert "one run cannot show" in suite_speed.unquiet({"serial": [(10, 20.0, "", 0.0)]})[0]


def test_a_record_replaces_the_one_of_the_same_command_in_its_place(suite_speed, tmp_path):
    """The pages quote the file's first record: re-recording it keeps it first."""
    import json

    path = tmp_path / "speed.json"
    host = {"cpu": "x"}
    suite_speed.record(path, ["--repeat", "3"], ["first"], host)
    suite_speed.record(path, ["--repeat", "3", "--cold"], ["second"], host)
    suite_speed.record(path, ["--repeat", "3"], ["first again"], host)
    records = json.loads(path.read_text())["records"]
    assert [r["output"] for r in records] == [["first again"], ["second"]]
