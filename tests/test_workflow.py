"""The nightly workflow and the nox matrix run exactly the commands docs/versions.md documents.

The workflow (.github/workflows/nightly.yml) is parsed as YAML; every command line of its
steps must be one of the commands in docs/versions.md's "Supported torch versions and the
nightly matrix" block (shell plumbing aside: a loop, a redirection into the step summary),
and every documented command must be used. The noxfile is run against a recording session.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is a dev dependency (pip install -e '.[dev]')")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
DOC = ROOT / "docs" / "versions.md"
SECTION = "## Supported torch versions and the nightly matrix"

#: Shell lines of a step that are plumbing around the documented commands, not commands.
PLUMBING = [
    r'PREV=""',
    r"for TORCH in [0-9. a-z]+; do",
    r'\[ -f "reports/\$TORCH/(cpu|atlas/atlas)\.json" \] \|\| continue',
    r'if \[ -n "\$PREV" \]; then',
    r"fi",
    r"PREV=\$TORCH",
    r"done",
]
#: What may follow a documented command on its line: append to the step summary, and accept
#: drift's exit status 1 ("drift found") as success.
SUFFIXES = [r' >> "\$GITHUB_STEP_SUMMARY"', r" \|\| \[ \$\? -eq 1 \]"]


def load_noxfile():
    spec = importlib.util.spec_from_file_location("amp_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox", reason="nox is a dev dependency (pip install -e '.[dev]')")
    return load_noxfile()


@pytest.fixture(scope="module")
def workflow():
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key `on` as the boolean True
    data["on"] = data.pop(True, data.get("on"))
    return data


def documented_commands() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/versions.md lacks the section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the section has no ```bash block of commands"
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [strip_plumbing(line) for line in lines if line and not line.startswith("#")]


def strip_plumbing(line: str) -> str:
    """A command without the allowed SUFFIXES."""
    stripped = None
    while stripped != line:
        stripped = line
        for suffix in SUFFIXES:
            line = re.sub(suffix + "$", "", line)
    return line


def steps(workflow):
    for job_id, job in workflow["jobs"].items():
        for step in job["steps"]:
            yield job_id, job, step


def command_lines(run: str) -> list[str]:
    """The commands of a run script, with the allowed plumbing removed."""
    found = []
    for raw in run.splitlines():
        line = raw.strip()
        if not line or any(re.fullmatch(p, line) for p in PLUMBING):
            continue
        found.append(strip_plumbing(line))
    return found


def test_versions_page_documents_the_matrix_commands():
    commands = documented_commands()
    assert len(commands) == 15
    assert 'pip install "torch==$TORCH.*" --index-url https://download.pytorch.org/whl/cpu' in commands
    assert ("pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/cpu"
            in commands)
    for device in ("cpu", "cuda", "xpu", "mps"):
        assert any(c.startswith(f"pytest --pyargs amp_conformance --device {device} ")
                   for c in commands), device


def test_workflow_runs_on_a_schedule_and_by_hand(workflow):
    assert workflow["on"]["schedule"][0]["cron"].count(" ") == 4
    assert "workflow_dispatch" in workflow["on"]


def test_every_workflow_command_is_documented_and_every_documented_one_used(workflow):
    documented = documented_commands()
    used = set()
    for job_id, _, step in steps(workflow):
        for line in command_lines(step.get("run", "")):
            assert line in documented, (
                f"job {job_id!r}, step {step.get('name')!r} runs {line!r}, which docs/versions.md "
                f"does not document in {SECTION!r}"
            )
            used.add(line)
    assert set(documented) - used == set(), "documented but never run by the workflow"


def test_matrix_is_every_supported_torch_and_the_nightly(workflow, noxfile):
    matrix = workflow["jobs"]["suite"]["strategy"]["matrix"]
    assert matrix["torch"] == noxfile.TORCH
    assert noxfile.TORCH[-1] == "nightly" and noxfile.TORCH[0] == "2.6"
    assert len(matrix["python"]) >= 2
    # the op lists are read with tomllib: Python 3.11 or newer
    assert all(tuple(map(int, v.split("."))) >= (3, 11) for v in matrix["python"])
    assert workflow["jobs"]["suite"]["strategy"]["fail-fast"] is False
    loop = next(s["run"] for _, _, s in steps(workflow) if "for TORCH in" in s.get("run", ""))
    assert re.search(r"for TORCH in ([0-9. a-z]+); do", loop).group(1).split() == noxfile.TORCH


def test_a_failure_names_its_torch_version(workflow):
    suite = workflow["jobs"]["suite"]
    assert "${{ matrix.torch }}" in suite["name"] and "${{ matrix.python }}" in suite["name"]
    assert suite["env"]["TORCH"] == "${{ matrix.torch }}"
    tests = [s for s in suite["steps"] if s.get("run", "").startswith("pytest ")]
    assert len(tests) == 7  # the CPU suite, three fake policies, two compiled tiers, OpInfo
    for step in tests:
        device = re.search(r"--device (\w+)", step["run"]).group(1)
        assert device in step["name"] and "${{ matrix.torch }}" in step["name"], step["name"]
        if "--fake" in step["run"]:
            # a failing CPU suite must not hide the fake policies
            assert step["if"].startswith("${{ !cancelled() && steps.install.outcome == 'success'")


def test_mps_runs_from_its_first_version(workflow, noxfile):
    (mps,) = [s for s in workflow["jobs"]["suite"]["steps"] if "--device mps" in s.get("run", "")]
    skipped = re.search(r"fromJSON\('(\[.*?\])'\)", mps["if"]).group(1)
    assert yaml.safe_load(skipped) == [v for v in noxfile.TORCH if "mps" not in noxfile.fake_devices(v)]


def test_reports_are_uploaded_and_drift_summarized(workflow):
    suite = workflow["jobs"]["suite"]["steps"]
    (upload,) = [s for s in suite if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert upload["with"]["path"] == "reports/"
    assert "${{ matrix.torch }}" in upload["with"]["name"]
    assert upload["if"] == "${{ !cancelled() }}"
    drift = workflow["jobs"]["drift"]
    assert drift["needs"] == "suite"
    (download,) = [s for s in drift["steps"]
                   if str(s.get("uses", "")).startswith("actions/download-artifact@")]
    assert download["with"]["path"] == "reports" and download["with"]["merge-multiple"] is True
    assert any('>> "$GITHUB_STEP_SUMMARY"' in s.get("run", "") for s in drift["steps"])
    (summary,) = [s for s in suite if "$GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert summary["run"] == 'cat reports/$TORCH/*.md >> "$GITHUB_STEP_SUMMARY"'
    assert suite.index(summary) < suite.index(upload)


def test_workflow_installs_torch_before_the_suite(workflow):
    for job_id, job in workflow["jobs"].items():
        runs = [s.get("run", "") for s in job["steps"]]
        torch_at = min(i for i, r in enumerate(runs) if "torch" in r and r.startswith("pip install"))
        assert runs.index("pip install .") > torch_at, job_id


class RecordingSession:
    """Stands in for nox.Session: records installs and commands."""

    def __init__(self, posargs=()):
        self.posargs = list(posargs)
        self.calls: list[tuple[str, ...]] = []

    def install(self, *args):
        self.calls.append(("pip", "install", *args))

    def run(self, *args, **kwargs):
        self.calls.append(tuple(args))

    def error(self, message):
        raise AssertionError(message)

    def log(self, message):
        pass


def documented(torch: str) -> set[tuple[str, ...]]:
    return {tuple(shlex.split(c.replace("$TORCH", torch))) for c in documented_commands()}


@pytest.mark.parametrize("torch", ["2.6", "2.15", "nightly"])
def test_nox_sessions_run_the_documented_commands(noxfile, monkeypatch, torch):
    monkeypatch.setenv("AMP_TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")
    allowed = documented(torch)
    for session_func, expected_runs in [(noxfile.cpu, 1), (noxfile.fake, len(noxfile.fake_devices(torch)))]:
        session = RecordingSession()
        session_func.func(session, torch=torch)
        commands = [c for c in session.calls if c[0] != "python"]
        assert all(c in allowed for c in commands), [c for c in commands if c not in allowed]
        assert [c[0] for c in commands] == ["pip", "pip"] + ["pytest"] * expected_runs
    assert noxfile.fake_devices(torch) == ["cuda", "xpu", "mps"]


def test_nox_installs_a_release_from_the_configured_index_by_default(noxfile, monkeypatch):
    monkeypatch.delenv("AMP_TORCH_INDEX_URL", raising=False)
    assert noxfile.install_commands("2.14") == [["install", "torch==2.14.*"], ["install", "."]]


def test_nox_lists_a_session_per_supported_torch(noxfile):
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "--list", "-f", str(ROOT / "noxfile.py")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    for torch in noxfile.TORCH:
        assert f"* cpu({torch})" in listed.stdout
        assert f"* fake({torch})" in listed.stdout
    assert "- drift" in listed.stdout
