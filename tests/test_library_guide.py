"""docs/library-guide.md walked literally: its files written as the page shows them into an
empty folder, its commands run there with the plain ``pytest`` command, and what they print
compared with the figures the page gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "library-guide.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(GUIDE.read_text(encoding="utf-8"))
            if lang == language]


def _ends_with() -> list[str]:
    """The summaries the page says each command ends with, in order."""
    return re.findall(r"ends with `([^`]+)`", GUIDE.read_text(encoding="utf-8"))


def test_the_library_guide_runs_as_printed(tmp_path):
    files = [b for b in _blocks("python") if b.startswith("# mylib/")]
    assert [f.splitlines()[0] for f in files] == ["# mylib/__init__.py", "# mylib/amp_decl.py"]
    for body in files:
        path = tmp_path / body.splitlines()[0].removeprefix("# ")
        path.parent.mkdir(exist_ok=True)
        path.write_text(body, encoding="utf-8")
    commands = [line for b in _blocks("bash") for line in b.splitlines()
                if line.startswith("pytest ")]
    wanted = _ends_with()
    assert len(commands) == len(wanted) == 2, (commands, wanted)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env.pop("PYTEST_ADDOPTS", None)
    for command, want in zip(commands, wanted, strict=True):
        proc = subprocess.run(["bash", "-c", f"{command} -p no:cacheprovider"], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-3000:]
        summary = re.search(r"=+ (\d+ passed(?:, \d+ skipped)?)", out)
        assert summary and summary.group(1) == want, (want, out[-2000:])
