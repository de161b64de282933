"""The wheel ships what `pytest --pyargs amp_conformance` needs: suite, op lists, entry point."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """Built from a copy without build outputs: setuptools reuses a checkout's ``build/``, whose
    stale files would ship what the configuration no longer does."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source") / "checkout"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", ".git", ".venv", ".nox", ".whl", ".hypothesis", ".ruff_cache",
        "__pycache__", "reports"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{proc.stderr[-3000:]}")
    (path,) = out.glob("amp_conformance-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_ships_suite_oplists_and_entry_point(wheel):
    names = set(wheel.namelist())
    shipped_lists = {p.name for p in (ROOT / "oplists").glob("*.toml")}
    assert {f"amp_conformance/oplists/{n}" for n in shipped_lists} <= names
    suite = {p.name for p in (ROOT / "amp_conformance" / "suite").glob("*.py")}
    assert {f"amp_conformance/suite/{n}" for n in suite} <= names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[pytest11]" in text and "amp_conformance = amp_conformance.plugin" in text


def test_wheel_ships_every_module_of_the_package(wheel):
    """setup.py finds the packages: a sub-package it missed would install without its
    modules (an ImportError only a wheel install shows)."""
    names = set(wheel.namelist())
    package = ROOT / "amp_conformance"
    modules = {f"amp_conformance/{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sorted(modules - names) == []


def test_wheel_ships_no_project_tests(wheel):
    assert not [n for n in wheel.namelist() if n.startswith("tests/")]
