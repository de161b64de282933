"""Integrations describe themselves: every folder under examples/wrappers/ and
examples/vendors/ with an integration.toml loads, names files that exist, and is one nox
session (``wrappers(<library>)``, ``vendor(<name>)``), found by glob with no noxfile edit.
The sessions run, against a recording session, the commands the folder describes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WRAPPER_FOLDERS = sorted(p.parent.name for p in ROOT.glob("examples/wrappers/*/integration.toml"))
VENDOR_FOLDERS = sorted(p.parent.name for p in ROOT.glob("examples/vendors/*/integration.toml"))


@pytest.fixture(scope="module")
def noxfile():
    pytest.importorskip("nox", reason="nox is a dev dependency (pip install -e '.[dev]')")
    from tests.test_workflow import load_noxfile

    return load_noxfile()


def test_every_example_folder_is_an_integration():
    assert {"accelerate", "open_clip", "speechbrain"} <= set(WRAPPER_FOLDERS)
    assert "xla" in VENDOR_FOLDERS
    # a folder without its integration.toml would be silently left out of nox
    assert sorted(p.name for p in (ROOT / "examples" / "wrappers").iterdir()
                  if p.is_dir() and p.name != "__pycache__") == WRAPPER_FOLDERS
    assert sorted(p.name for p in (ROOT / "examples" / "vendors").iterdir()
                  if p.is_dir()) == VENDOR_FOLDERS


def test_each_wrapper_integration_names_its_declaration_and_files(noxfile):
    specs = noxfile.integrations("wrappers")
    assert list(specs) == WRAPPER_FOLDERS
    for name, spec in specs.items():
        folder = ROOT / spec["folder"]
        assert spec["folder"] == f"examples/wrappers/{name}"
        module, _, attr = spec["declaration"].partition(":")
        assert attr == "WRAPPERS" and (folder / f"{module}.py").is_file(), name
        assert "WRAPPERS" in (folder / f"{module}.py").read_text(), name
        assert re.fullmatch(r"\d+\.\d+\.\d+", spec["torch"]), name
        assert spec["requirements"] and all(isinstance(r, str) for r in spec["requirements"])
        if "xfail" in spec:
            assert (folder / spec["xfail"]).is_file(), name
    # the pins of the libraries the docs record (speechbrain: no torchaudio for 2.13)
    assert {n: specs[n]["torch"] for n in ("open_clip", "speechbrain", "accelerate", "lightning",
                                           "mmengine", "ultralytics")} == {
        "open_clip": "2.13.0", "speechbrain": "2.11.0", "accelerate": "2.13.0",
        "lightning": "2.13.0", "mmengine": "2.13.0", "ultralytics": "2.13.0"}
    assert specs["accelerate"]["xfail"] == "xfail.txt" and "xfail" not in specs["open_clip"]


def test_each_vendor_integration_names_its_files_and_pins_its_requirements(noxfile):
    specs = noxfile.integrations("vendors")
    assert list(specs) == VENDOR_FOLDERS
    for name, spec in specs.items():
        folder = ROOT / spec["folder"]
        assert spec["folder"] == f"examples/vendors/{name}"
        for key in ("oplist", "capabilities", "xfail", "defects"):
            if key in spec:
                assert (folder / spec[key]).exists(), (name, key)
        assert all("==" in r for r in spec["requirements"]), spec["requirements"]
        assert all(isinstance(v, str) for v in spec["env"].values())
    assert {k: specs["xla"][k] for k in ("backend", "module", "device", "requirements", "env")} == {
        "backend": "PyTorch/XLA", "module": "torch_xla", "device": "xla",
        "requirements": ["torch==2.9.0", "torch-xla==2.9.0"],
        "env": {"PJRT_DEVICE": "CPU", "XLA_COMPILATION_CACHE_SIZE": "256"}}


def test_a_new_folder_is_a_new_integration_and_a_bad_one_names_its_file(noxfile, tmp_path):
    lib = tmp_path / "examples" / "wrappers" / "newlib"
    lib.mkdir(parents=True)
    (lib / "integration.toml").write_text(
        'requirements = ["newlib"]\ntorch = "2.13.0"\ndeclaration = "newlib_decl:WRAPPERS"\n')
    (tmp_path / "examples" / "wrappers" / "not_one").mkdir()  # no integration.toml
    assert noxfile.integrations("wrappers", root=tmp_path) == {"newlib": {
        "requirements": ["newlib"], "torch": "2.13.0", "declaration": "newlib_decl:WRAPPERS",
        "folder": "examples/wrappers/newlib"}}
    (lib / "integration.toml").write_text('requirements = ["newlib"]\ntorch = "2.13.0"\npin = 1\n')
    with pytest.raises(ValueError, match=r"examples/wrappers/newlib/integration.toml: missing "
                                         r"\['declaration'\], unknown \['pin'\]"):
        noxfile.integrations("wrappers", root=tmp_path)


def test_nox_lists_one_session_per_integration_folder():
    pytest.importorskip("nox", reason="nox is a dev extra: pip install -e '.[dev]'")
    listed = subprocess.run([sys.executable, "-m", "nox", "--list", "-f", str(ROOT / "noxfile.py")],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert listed.returncode == 0, listed.stderr
    sessions = re.findall(r"^[*-] (\S+)", listed.stdout, re.M)
    assert sorted(s for s in sessions if s.startswith("wrappers")) == [
        f"wrappers({n})" for n in WRAPPER_FOLDERS]
    assert sorted(s for s in sessions if s.startswith("vendor")) == [
        f"vendor({n})" for n in VENDOR_FOLDERS]
    for name in WRAPPER_FOLDERS:
        assert re.search(rf"^- wrappers\({name}\) \[wrappers\]", listed.stdout, re.M), name
    for name in VENDOR_FOLDERS:
        assert re.search(rf"^- vendor\({name}\) \[vendors\]", listed.stdout, re.M), name


class RecordingSession:
    """Stands in for nox.Session: records installs, commands (with their environment) and
    the folder they run in; a supervised run leaves a completed report."""

    def __init__(self, fail_on: str | None = None):
        self.posargs: list[str] = []
        self.calls: list[tuple] = []
        self.where = None
        self.fail_on = fail_on

    def install(self, *args, **kwargs):
        self.calls.append(("pip", "install", *args))

    def run(self, *args, env=None, **kwargs):
        self.calls.append((*args, self.where, (env or {}).get("PYTHONPATH")))
        if self.fail_on and self.fail_on in args:
            import nox

            raise nox.command.CommandFailed("recorded failure")
        if "run" in args and "--report" in args:
            report = Path(args[args.index("--report") + 1])
            report.write_text(json.dumps({"run": {"status": "completed", "exitstatus": 0}}))
        return "coverage xla: 1/1 covered\n" if "coverage" in args else None

    def error(self, message):
        raise AssertionError(message)

    @contextlib.contextmanager
    def chdir(self, folder):
        self.where = Path(folder).relative_to(ROOT).as_posix()
        yield
        self.where = None


def test_a_wrapper_session_runs_its_folder(noxfile, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the session writes reports/wrappers/ under the cwd
    session = RecordingSession()
    noxfile.wrappers.func(session, library="accelerate")
    path = os.pathsep.join([f"{ROOT}/examples/wrappers/accelerate", f"{ROOT}/examples/wrappers"])
    installs = [c for c in session.calls if c[0] == "pip"]
    assert installs == [("pip", "install", "torch==2.13.0"), ("pip", "install", "."),
                        ("pip", "install", "accelerate", "torch==2.13.0")]
    meta, tier = [c for c in session.calls if c[0] != "pip"]
    assert meta[:2] == ("python", "-c") and meta[3:] == (
        "accelerate_decl:WRAPPERS", "reports/wrappers/accelerate.meta.json", None, path)
    assert tier == ("pytest", "--pyargs", "amp_conformance", "--device", "cpu", "--wrapper",
                    "accelerate_decl:WRAPPERS", "--conformance-report",
                    "reports/wrappers/accelerate.json", "-k", "wrapper", "-p", "no:cacheprovider",
                    "--xfail-file=examples/wrappers/accelerate/xfail.txt", None, path)


def test_a_wrapper_that_does_not_import_is_blocked_naming_its_module(noxfile, monkeypatch,
                                                                     tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="speechbrain: blocked"):
        noxfile.wrappers.func(RecordingSession(fail_on="-c"), library="speechbrain")
    blocked = json.loads((tmp_path / "reports/wrappers/speechbrain.blocked.json").read_text())
    assert blocked == {"library": "speechbrain", "reason": "examples/wrappers/speechbrain/"
                       "speechbrain_decl.py does not import (see the session's log)"}


def test_a_vendor_session_runs_from_its_folder(noxfile, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    session = RecordingSession()
    noxfile.vendor.func(session, name="xla")
    reports = tmp_path / "reports" / "vendors"
    assert session.calls[:2] == [("pip", "install", "torch==2.9.0", "torch-xla==2.9.0"),
                                 ("pip", "install", ".[opinfo]")]
    runs = session.calls[2:]
    assert {c[-2] for c in runs} == {"examples/vendors/xla"}
    assert [c[:-2] for c in runs[:4]] == [
        ("python", "-m", "amp_conformance", "discover", "--device", "xla", "--backend-module",
         "torch_xla", "--out", f"{reports}/xla.discovered.toml", "-q"),
        ("python", "-m", "amp_conformance", "coverage", "--device", "xla", "--backend-module",
         "torch_xla", "--oplist=xla.toml", "-q"),
        ("python", "-m", "amp_conformance", "run", "--report", f"{reports}/xla.json", "--",
         "--pyargs", "amp_conformance", "--backend-module", "torch_xla", "--device", "xla",
         "--oplist=xla.toml", "--capabilities=capabilities.toml", "--xfail-file=xfail.txt"),
        ("python", "-m", "amp_conformance", "atlas", "--devices", "xla,cpu", "--backend-module",
         "torch_xla", "--oplist=xla.toml", "--out", f"{reports}/xla.atlas.md", "--json",
         f"{reports}/xla.atlas.json")]
    meta = json.loads(runs[4][-3])
    assert meta["command"] == noxfile.vendor_command("xla") == (
        "PJRT_DEVICE=CPU XLA_COMPILATION_CACHE_SIZE=256 python -m amp_conformance run --report "
        "R.json -- --pyargs amp_conformance --backend-module torch_xla --device xla --oplist=xla.toml "
        "--capabilities=capabilities.toml --xfail-file=xfail.txt")
    assert meta["coverage"] == "coverage xla: 1/1 covered"
