"""The conformance suite over torch versions: one nox session per supported torch.

    nox --list                      # the sessions: cpu(2.4) … cpu(2.14), cpu(nightly), fake(…), drift
    nox -s "cpu(2.13)"              # the CPU suite on torch 2.13 -> reports/2.13/cpu.json
    nox -t torch-2.13               # CPU and the fake cuda/xpu/mps policies on torch 2.13
    nox -s drift -- 2.13 2.14       # what changed between the two CPU reports

Each session installs one torch into its own virtualenv, then the suite, and runs the
commands README.md documents ("Supported torch versions and the nightly matrix"); the
nightly workflow (.github/workflows/nightly.yml) runs the same commands, one job per
torch. A release is installed as ``torch==<major.minor>.*`` (its newest patch) from pip's
configured index; set ``AMP_TORCH_INDEX_URL`` (e.g. https://download.pytorch.org/whl/cpu,
as the nightly workflow does) to take it from another. ``nightly`` is PyTorch's nightly
CPU build.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

#: Every torch release the suite supports, oldest first (README "Supported torch versions").
TORCH_RELEASES = ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14"]
NIGHTLY = "nightly"
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"
TORCH = [*TORCH_RELEASES, NIGHTLY]
#: Device policies checked without the hardware (--fake), each from the first release it
#: is run on: MPS autocast arrived after 2.4 (pytorch#99272), 2.6 is the first release
#: this project expects to have it (docs/versions.md).
FAKE_DEVICES = {"cuda": "2.4", "xpu": "2.4", "mps": "2.6"}

nox.options.sessions = [f"cpu({v})" for v in TORCH] + [f"fake({v})" for v in TORCH]


def _key(version: str) -> tuple[int, ...]:
    return (10**6,) if version == NIGHTLY else tuple(int(p) for p in version.split("."))


def fake_devices(torch: str) -> list[str]:
    """The device policies the fake session of ``torch`` checks."""
    return [d for d, since in FAKE_DEVICES.items() if _key(torch) >= _key(since)]


def install_commands(torch: str) -> list[list[str]]:
    """pip commands (arguments after ``pip``) that install ``torch`` and then the suite."""
    if torch == NIGHTLY:
        first = ["install", "--pre", "torch", "--index-url", NIGHTLY_INDEX]
    else:
        first = ["install", f"torch=={torch}.*"]
        index = os.environ.get("AMP_TORCH_INDEX_URL")
        if index:
            first += ["--index-url", index]
    return [first, ["install", "."]]


def suite_command(torch: str, device: str, fake: bool = False) -> list[str]:
    """The pytest command of one run and its report (``reports/<torch>/<device>[-fake].json``)."""
    name = f"{device}-fake" if fake else device
    return ["pytest", "--pyargs", "amp_conformance", "--device", device,
            *(["--fake"] if fake else []), "--conformance-report", f"reports/{torch}/{name}.json"]


def _install(session: nox.Session, torch: str) -> None:
    for args in install_commands(torch):
        session.install(*args[1:])
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")


@nox.session
@nox.parametrize("torch", TORCH, ids=TORCH, tags=[[f"torch-{v}", "cpu"] for v in TORCH])
def cpu(session: nox.Session, torch: str) -> None:
    """The CPU suite, for real, on one torch."""
    _install(session, torch)
    session.run(*suite_command(torch, "cpu"), *session.posargs)


@nox.session
@nox.parametrize("torch", TORCH, ids=TORCH, tags=[[f"torch-{v}", "fake"] for v in TORCH])
def fake(session: nox.Session, torch: str) -> None:
    """The CUDA, XPU and MPS (from 2.6) policies without their hardware (--fake) on one torch."""
    _install(session, torch)
    failed = []
    for device in fake_devices(torch):
        try:
            session.run(*suite_command(torch, device, fake=True), *session.posargs)
        except nox.command.CommandFailed:
            failed.append(device)
    if failed:
        session.error(f"the fake {', '.join(failed)} suite failed on torch {torch}")


@nox.session(python=False)
def drift(session: nox.Session) -> None:
    """Drift between the CPU reports of two torch versions: ``nox -s drift -- 2.13 2.14``.

    Without arguments, every two consecutive versions that have a report. Runs in the
    environment nox itself runs from (the project must be installed there).
    """
    versions = list(session.posargs) or sorted(
        (p.name for p in Path("reports").glob("*") if (p / "cpu.json").is_file()), key=_key)
    if len(versions) < 2:
        session.error("give two torch versions with reports, e.g. nox -s drift -- 2.13 2.14")
    for a, b in zip(versions, versions[1:], strict=False):
        session.run("python", "-m", "amp_conformance", "drift", f"reports/{a}/cpu.json",
                    f"reports/{b}/cpu.json", success_codes=[0, 1])
