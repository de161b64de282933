"""docs/architecture.md's recipes are true: a check, a family and an opt-in tier are added
with the files it names, and nothing else (registry, skip validation, report, selftest and
the plugin's gate follow).

Each case copies the package and its op lists into a temporary folder, adds the files the
recipe names, and runs the copy there (first on ``PYTHONPATH``, so the copy's plugin and
families are the ones found).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import children

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The package and the op lists, as a checkout has them (no other file)."""
    shutil.copytree(ROOT / "amp_conformance", tmp_path / "amp_conformance",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "oplists", tmp_path / "oplists")
    return tmp_path


def _write(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(textwrap.dedent(text), encoding="utf-8")


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTEST_ADDOPTS", None)
    return children.run([sys.executable, *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


def _suite(root: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    return _run(root, "-m", "pytest", "--pyargs", f"amp_conformance.suite.{module}", "-q",
                "-p", "no:cacheprovider", "--device", "cpu", *args)


DEMO_FAMILY = '''\
    """A demo family: torch.mm under autocast gives the autocast dtype."""

    import torch

    from amp_conformance.core.errors import ConformanceFailure
    from amp_conformance.core.registry import Check

    CHECKS = (Check("demo", "torch.mm under autocast gives the autocast dtype"),)


    def check_mm(target, amp_dtype):
        with target.autocast(amp_dtype):
            out = torch.mm(torch.ones(2, 2), torch.ones(2, 2))
        if out.dtype != amp_dtype:
            raise ConformanceFailure(f"demo: torch.mm gave {out.dtype} under {amp_dtype}")
    '''
DEMO_MUTANTS = '''\
    from amp_conformance.checks.mutation import Mutant, keep_dtype, register

    register(Mutant(name="demo-mm-kept-fp32", description="mm casts nothing",
                    apply=keep_dtype("mm"), expect="demo: torch.mm gave torch.float32",
                    select="test_demo_mm"))
    '''
DEMO_SUITE = '''\
    import pytest

    from amp_conformance.checks.demo import check_mm

    pytestmark = pytest.mark.amp_check("demo")


    def test_demo_mm(amp_target, amp_dtype):
        check_mm(amp_target, amp_dtype)
    '''


@pytest.mark.slow
def test_a_family_is_one_folder_and_its_suite_module(copy):
    _write(copy, "amp_conformance/checks/demo/__init__.py", DEMO_FAMILY)
    _write(copy, "amp_conformance/checks/demo/mutants.py", DEMO_MUTANTS)
    _write(copy, "amp_conformance/suite/test_demo.py", DEMO_SUITE)
    report = copy / "r.json"
    run = _suite(copy, "test_demo", f"--conformance-report={report}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(report.read_text())
    assert [(r["test"], r["param"], r["outcome"]) for r in data["results"]] == [
        ("test_demo_mm", "cpu-bfloat16", "passed"), ("test_demo_mm", "cpu-float16", "passed")]
    assert {r["check"] for r in data["results"]} == {"demo"}
    assert "demo" in data["families"]
    table = _run(copy, "-m", "amp_conformance.checks.registry")
    assert "| `demo` | `demo` |" in table.stdout, table.stdout + table.stderr
    killed = _run(copy, "-m", "amp_conformance", "selftest", "--only", "demo-mm-kept-fp32")
    assert killed.returncode == 0 and "killed 1/1" in killed.stdout, killed.stdout[-3000:]


def test_a_check_is_its_family_module_and_its_suite_test(copy):
    """A second check of an existing family (regions): its declaration and logic in the
    family's module, its suite test; an op-list skip could not name it (not per entry), the
    report has its row."""
    family = copy / "amp_conformance/checks/regions/__init__.py"
    family.write_text(family.read_text() + textwrap.dedent('''
        CHECKS = (*CHECKS, Check("regions_depth", "the nesting depth counts regions"))


        def check_depth(target, amp_dtype):
            import torch
            from amp_conformance.core.errors import ConformanceFailure
            with target.autocast(amp_dtype), target.autocast(amp_dtype):
                depth = torch.autocast_increment_nesting() - 1
                torch.autocast_decrement_nesting()
            if depth != 2:
                raise ConformanceFailure(f"nesting depth {depth} inside two regions")
        '''))
    _write(copy, "amp_conformance/suite/test_regions_depth.py", '''\
        import pytest

        from amp_conformance.checks.regions import check_depth

        pytestmark = pytest.mark.amp_check("regions_depth")


        def test_depth(amp_target, amp_dtype):
            check_depth(amp_target, amp_dtype)
        ''')
    report = copy / "r.json"
    run = _suite(copy, "test_regions_depth", f"--conformance-report={report}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["families"]["regions_depth"]["passed"] == 2


@pytest.mark.slow
def test_an_opt_in_tier_is_a_family_with_a_tier(copy):
    """Its option, its gate (no item without it), its settings: one small subclass."""
    _write(copy, "amp_conformance/checks/extra/__init__.py", '''\
        """An opt-in demo tier."""

        from amp_conformance.checks.tier import Tier
        from amp_conformance.core.registry import Check

        CHECKS = (Check("extra", "a demo tier", opt_in="--amp-extra"),)


        class ExtraTier(Tier):
            check = "extra"
            options = {"--amp-extra": dict(dest="amp_extra", action="store_true",
                                           default=False, help="the demo tier")}

            def resolve(self, config, run):
                return {"extra_on": config.getoption("amp_extra")}

            def enabled(self, settings):
                return settings.extra["extra_on"]


        TIER = ExtraTier()
        ''')
    _write(copy, "amp_conformance/suite/test_extra.py", '''\
        import pytest

        pytestmark = pytest.mark.amp_check("extra")


        def test_extra(amp_dtype):
            assert amp_dtype is not None
        ''')
    off = _suite(copy, "test_extra")
    assert off.returncode == 5 and "no tests ran" in off.stdout, off.stdout[-2000:]
    on = _suite(copy, "test_extra", "--amp-extra")
    assert on.returncode == 0 and "2 passed" in on.stdout, on.stdout[-2000:] + on.stderr[-2000:]
