"""benchmarks/suite_speed.py's verdicts on its runs: a figure is recorded only from a quiet
machine, and a before/after (``--against``) shows a change only where every pair agrees."""

from __future__ import annotations

import importlib
import subprocess
import sys
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


@pytest.fixture
def timeline(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("timeline")


def test_the_timeline_shows_each_process_main_first(timeline):
    row = {"items": 5, "cpu": 2.5, "marks": {"plugins": 1.8, "first item": 4.4, "end": 9.0}}
    shown = timeline.table([{**row, "process": "gw1"}, {**row, "process": "main",
                                                       "marks": {"plugins": 1.7}}], 9.5)
    lines = shown.splitlines()
    assert lines[0].split() == ["process", "plugins", "collected", "first", "item", "last",
                                "item", "end", "CPU", "s", "items"]
    assert lines[1].split() == ["main", "1.70", "-", "-", "-", "-", "2.50", "5"]
    assert lines[2].split() == ["gw1", "1.80", "-", "4.40", "-", "9.00", "2.50", "5"]
    assert lines[-1] == "wall 9.50 s (seconds from the command's start)"


@pytest.mark.slow
def test_the_timeline_of_a_real_run(tmp_path):
    """Its plugin marks a real pytest run's process (a fresh interpreter: the tool's own)."""
    done = subprocess.run([sys.executable, str(BENCHMARKS / "timeline.py"), "--device", "cpu",
                           "-k", "test_non_string_device_type"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    summary, *rows = done.stdout.splitlines()
    main = next(row.split() for row in rows if row.startswith("main "))
    plugins, collected, first, last, end = map(float, main[1:6])
    assert 0 < plugins <= collected <= first <= last <= end
    assert summary.startswith(f"{main[-1]} passed"), done.stdout


@pytest.fixture
def tests_cpu(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("tests_cpu")


def test_the_cpu_table_shows_the_costliest_files_then_tests(tests_cpu):
    rows = [["tests/a.py::t1", 2.0, 1.0], ["tests/b.py::t2", 1.0, 5.0], ["tests/a.py::t3", 1.0, 3.0]]
    lines = tests_cpu.summary(rows, top=2).splitlines()
    assert [line.split() for line in lines[1:3]] == [["5.0", "1.0", "tests/b.py"],
                                                      ["4.0", "3.0", "tests/a.py"]]
    assert [line.split()[-1] for line in lines[4:]] == ["tests/b.py::t2", "tests/a.py::t3"]


BUSY = """
import subprocess, sys

def test_idle():
    pass

def test_a_child_that_computes():
    subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\n"
                    "while time.process_time() - t < 0.5: pass"], check=True)
"""


@pytest.mark.slow
def test_the_cpu_a_test_spent_in_its_child_is_its_own(tmp_path):
    """A real run: the CPU of a child the test waited for is counted on the test."""
    (tmp_path / "test_busy.py").write_text(BUSY, encoding="utf-8")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "tests_cpu.py"), str(tmp_path),
                           "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    rows = {line.split()[-1].rsplit("::", 1)[-1]: float(line.split()[0])
            for line in done.stdout.splitlines() if "::test_" in line}
    assert rows["test_a_child_that_computes"] >= 0.45 > rows["test_idle"], done.stdout
    assert "within its 2 tests" in done.stdout
