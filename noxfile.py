"""The conformance suite over torch versions: one nox session per supported torch.

    nox --list                      # cpu(2.6) … cpu(2.15), cpu(nightly), fake(…), release(…), drift
    nox -s "cpu(2.13)"              # the CPU suite on torch 2.13 -> reports/2.13/cpu.json
    nox -t torch-2.13               # CPU and the fake cuda/xpu/mps policies on torch 2.13
    nox -s drift -- 2.13 2.14       # what changed between the two CPU reports
    nox -t matrix                   # every release here, one at a time: the CPU suite and the
                                    # fake tiers in one virtualenv, removed after its run
    nox -s versions                 # docs/versions.md's matrix table from reports/
    nox -s "wrappers(open_clip)"    # a library's autocast wrappers under the wrapper tier
                                    # (nox -t wrappers: all of them; docs/wrappers.md)
    nox -s "vendor(xla)"            # PyTorch/XLA end to end from examples/vendors/xla/
                                    # (nox -t vendors: every backend; docs/vendors.md)

A wrapper library or a backend is a folder under examples/wrappers/ or examples/vendors/
with an integration.toml (what to install, what to run); the sessions are found from them.

Each session installs one torch into its own virtualenv, then the suite, and runs the
commands docs/versions.md documents ("Supported torch versions and the nightly matrix"); the
nightly workflow (.github/workflows/nightly.yml) runs the same commands, one job per
torch. A release is installed as ``torch==<major.minor>.*`` (its newest patch) from pip's
configured index; set ``AMP_TORCH_INDEX_URL`` (e.g. https://download.pytorch.org/whl/cpu,
as the nightly workflow does) to take it from another. ``nightly`` is PyTorch's nightly
CPU build.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import tomllib
from pathlib import Path

import nox

#: the checkout: integrations are found under its examples/ wherever nox runs from
HERE = Path(__file__).resolve().parent

#: Every torch release the suite supports, oldest first (docs/versions.md).
TORCH_RELEASES = ["2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14", "2.15"]
NIGHTLY = "nightly"
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"
TORCH = [*TORCH_RELEASES, NIGHTLY]
#: Device policies checked without the hardware (--fake), each from the first release it
#: is run on (every supported release since the floor became 2.6: docs/versions.md).
FAKE_DEVICES = {"cuda": "2.6", "xpu": "2.6", "mps": "2.6"}

nox.options.sessions = [f"cpu({v})" for v in TORCH] + [f"fake({v})" for v in TORCH]
#: pip's environment for a matrix install: no wheel cache (a CUDA build of torch is about
#: 5 GB, one per release), and no site constraint file (a machine may cap torch below the
#: release the session pins; the pin is the point). An empty constraint file overrides it.
MATRIX_PIP_ENV = {"PIP_NO_CACHE_DIR": "1"}


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


@nox.session
@nox.parametrize("torch", TORCH_RELEASES, ids=TORCH_RELEASES,
                 tags=[[f"torch-{v}", "matrix"] for v in TORCH_RELEASES])
def release(session: nox.Session, torch: str) -> None:
    """One release of the matrix: install it once, run the CPU suite and every fake tier
    (each run continues past another's failure), then remove the virtualenv (disk is
    limited: a CUDA build of torch is about 5 GB). ``reports/<torch>/`` keeps the reports."""
    empty = Path(session.create_tmp()) / "no-constraints.txt"
    empty.write_text("")
    env = {**MATRIX_PIP_ENV, "PIP_CONSTRAINT": str(empty)}
    for args in install_commands(torch):
        session.install(*args[1:], env=env)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")
    runs = [("cpu", False)] + [(d, True) for d in fake_devices(torch)]
    failed = []
    try:
        for device, fake in runs:
            try:
                session.run(*suite_command(torch, device, fake=fake), *session.posargs)
            except nox.command.CommandFailed:
                failed.append(f"{device}-fake" if fake else device)
    finally:
        location = getattr(session.virtualenv, "location", None)
        if location and Path(location).is_dir():
            shutil.rmtree(location, ignore_errors=True)
    if failed:
        session.error(f"torch {torch}: {', '.join(failed)} failed")


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


# -- integrations: folders under examples/ that describe themselves ----------------------

#: what an integration.toml holds, per kind: required keys, then optional ones (a library's
#: folder under examples/wrappers/, a backend's under examples/vendors/)
INTEGRATION_KEYS = {
    "wrappers": ({"requirements", "torch", "declaration"}, {"xfail", "env"}),
    "vendors": ({"backend", "module", "device", "requirements", "env", "oplist"},
                {"capabilities", "xfail", "defects"}),
}


def integrations(kind: str, root: Path = HERE) -> dict[str, dict]:
    """Every ``examples/<kind>/<name>/integration.toml`` of ``root``, by folder name, so that
    adding a library or a backend is one folder and no edit here. Each spec gains
    ``folder`` (``examples/<kind>/<name>``, relative to the checkout); a missing or unknown
    key fails here, naming the file, rather than halfway through a session."""
    required, optional = INTEGRATION_KEYS[kind]
    found = {}
    for path in sorted((root / "examples" / kind).glob("*/integration.toml")):
        with path.open("rb") as f:
            spec = tomllib.load(f)
        where = path.relative_to(root)
        if required - set(spec) or set(spec) - required - optional:
            raise ValueError(f"{where}: missing {sorted(required - set(spec))}, unknown "
                             f"{sorted(set(spec) - required - optional)}")
        spec["folder"] = where.parent.as_posix()
        found[path.parent.name] = spec
    return found


#: The libraries whose autocast wrappers the wrapper tier checks (docs/wrappers.md): one
#: folder each under examples/wrappers/ (its integration.toml: pip requirements after torch,
#: the torch it runs, its declaration ``module:NAME``, its expected failures). Each is
#: installed from the package registry into its own virtualenv: never part of the default
#: sessions, the matrix or .ci/run.
WRAPPER_LIBRARIES = integrations("wrappers")
WRAPPER_REPORTS = Path("reports") / "wrappers"
#: what the session writes beside the tier's report (amp_conformance/tools/wrappers_table.py)
WRAPPER_META = """import importlib, json, sys, torch
module, _, name = sys.argv[1].partition(":")
wrappers = getattr(importlib.import_module(module), name)
first = wrappers[0]
json.dump({"library": first.library, "version": first.version, "torch": torch.__version__,
           "wrappers": [w.name for w in wrappers]}, open(sys.argv[2], "w"), indent=1)
"""


def wrapper_torch(library: str) -> str:
    """The torch release one library's session runs (its integration.toml's pin)."""
    return WRAPPER_LIBRARIES[library]["torch"]


def wrapper_requirements(library: str, torch: str | None = None) -> list[str]:
    """pip requirements of one wrapper session, torch pinned on every install so that no
    library pulls another (CUDA) torch; torchaudio pinned to torch's release."""
    torch = torch or wrapper_torch(library)
    release = ".".join(torch.split(".")[:2])
    pins = {"torchaudio": f"torchaudio=={release}.*"}
    return [pins.get(r, r) for r in WRAPPER_LIBRARIES[library]["requirements"]] + [f"torch=={torch}"]


def wrapper_pythonpath(library: str) -> str:
    """The library's folder (its declaration module) and examples/wrappers (shared helpers)."""
    folder = HERE / WRAPPER_LIBRARIES[library]["folder"]
    return os.pathsep.join([str(folder), str(folder.parent)])


def wrapper_command(library: str) -> list[str]:
    """The wrapper tier's pytest command for one library (its folder on PYTHONPATH)."""
    spec = WRAPPER_LIBRARIES[library]
    xfail = [f"--xfail-file={spec['folder']}/{spec['xfail']}"] if "xfail" in spec else []
    return ["pytest", "--pyargs", "amp_conformance", "--device", "cpu", "--wrapper",
            spec["declaration"], "--conformance-report", str(WRAPPER_REPORTS / f"{library}.json"),
            "-k", "wrapper", "-p", "no:cacheprovider", *xfail]


@nox.session(tags=["wrappers"])
@nox.parametrize("library", list(WRAPPER_LIBRARIES), ids=list(WRAPPER_LIBRARIES))
def wrappers(session: nox.Session, library: str) -> None:
    """One library's autocast wrappers under the wrapper tier, on CPU:
    ``nox -s "wrappers(open_clip)"`` -> reports/wrappers/open_clip.json (+ .meta.json), or
    reports/wrappers/<library>.blocked.json where the library cannot be installed or
    imported. ``nox -t wrappers`` runs every library; ``python -m
    amp_conformance.tools.wrappers_table --reports reports/wrappers --summary
    docs/data/wrappers-observed.json --write docs/wrappers.md`` then updates the docs."""
    WRAPPER_REPORTS.mkdir(parents=True, exist_ok=True)
    for stale in WRAPPER_REPORTS.glob(f"{library}.*"):
        stale.unlink()
    blocked = WRAPPER_REPORTS / f"{library}.blocked.json"

    def block(reason: str) -> None:
        blocked.write_text(json.dumps({"library": library, "reason": reason}, indent=1) + "\n")
        session.error(f"{library}: blocked: {reason}")

    spec = WRAPPER_LIBRARIES[library]
    env = {**spec.get("env", {}), "PYTHONPATH": wrapper_pythonpath(library)}
    session.install(f"torch=={wrapper_torch(library)}")  # first, before any library
    session.install(".")
    try:
        session.install(*wrapper_requirements(library), env=spec.get("env", {}))
    except nox.command.CommandFailed:
        block(f"pip could not install {' '.join(wrapper_requirements(library))}")
    meta = str(WRAPPER_REPORTS / f"{library}.meta.json")
    try:
        session.run("python", "-c", WRAPPER_META, spec["declaration"], meta, env=env)
    except nox.command.CommandFailed:
        module = spec["declaration"].partition(":")[0]
        block(f"{spec['folder']}/{module}.py does not import (see the session's log)")
    session.run(*wrapper_command(library), *session.posargs, env=env)


# -- real out-of-tree autocast implementations (examples/vendors/, docs/vendors.md) -------

#: The backends run end to end (docs/vendors.md): one folder each under examples/vendors/
#: (its integration.toml: backend, module, device, pinned requirements, environment, and
#: the op list, capabilities and expected failures beside it). Each is installed from the
#: package registry into the session's own virtualenv: never part of the default sessions,
#: the matrix or .ci/run.
VENDORS = integrations("vendors")
VENDOR_REPORTS = Path("reports") / "vendors"
VENDOR_META = """import importlib, json, sys, torch
module = importlib.import_module(sys.argv[1])
meta = json.loads(sys.argv[3])
meta.update(version=getattr(module, "__version__", None), torch=torch.__version__)
json.dump(meta, open(sys.argv[2], "w"), indent=1)
"""


def vendor_suite_args(name: str) -> list[str]:
    """The pytest arguments of a backend's supervised run, from its folder (README there)."""
    spec = VENDORS[name]
    return ["--pyargs", "amp_conformance", "--backend-module", spec["module"], "--device",
            spec["device"], f"--oplist={spec['oplist']}",
            *([f"--capabilities={spec['capabilities']}"] if "capabilities" in spec else []),
            *([f"--xfail-file={spec['xfail']}"] if "xfail" in spec else [])]


def vendor_command(name: str) -> str:
    """The supervised run as a vendor types it in examples/vendors/<name>/."""
    env = " ".join(f"{k}={v}" for k, v in VENDORS[name]["env"].items())
    return (f"{env} python -m amp_conformance run --report R.json -- "
            + " ".join(vendor_suite_args(name))).strip()


@nox.session(tags=["vendors"])
@nox.parametrize("name", list(VENDORS), ids=list(VENDORS))
def vendor(session: nox.Session, name: str) -> None:
    """One backend end to end, from its folder: ``nox -s "vendor(xla)"`` runs discover (a
    draft list from the CUDA lists, to compare with its op list), the coverage of its
    Autocast kernels by its op list, the supervised suite with its capabilities and
    expected failures, and the atlas's column of its device beside cpu ->
    reports/vendors/<name>.json (+ .meta.json, .atlas.md). ``nox -t vendors`` runs every
    backend; ``python -m amp_conformance.tools.vendors_table --reports reports/vendors
    --summary docs/data/vendors-observed.json --write docs/vendors.md`` then updates the docs."""
    _vendor(session, name)


def _vendor(session: nox.Session, name: str) -> None:
    spec = VENDORS[name]
    reports = VENDOR_REPORTS.resolve()
    reports.mkdir(parents=True, exist_ok=True)
    for stale in reports.glob(f"{name}.*"):
        stale.unlink()
    session.install(*spec["requirements"], env=MATRIX_PIP_ENV)
    session.install(".[opinfo]", env=MATRIX_PIP_ENV)  # the atlas reads op_db (expecttest)
    env = dict(spec["env"])
    with session.chdir(HERE / spec["folder"]):
        session.run("python", "-m", "amp_conformance", "discover", "--device", spec["device"],
                    "--backend-module", spec["module"], "--out",
                    str(reports / f"{name}.discovered.toml"), "-q", env=env)
        coverage = session.run("python", "-m", "amp_conformance", "coverage", "--device",
                               spec["device"], "--backend-module", spec["module"],
                               f"--oplist={spec['oplist']}", "-q", env=env, silent=True)
        began = time.monotonic()
        session.run("python", "-m", "amp_conformance", "run", "--report",
                    str(reports / f"{name}.json"), "--", *vendor_suite_args(name),
                    *session.posargs, env=env, success_codes=range(256))
        wall = time.monotonic() - began
        session.run("python", "-m", "amp_conformance", "atlas", "--devices",
                    f"{spec['device']},cpu", "--backend-module", spec["module"],
                    f"--oplist={spec['oplist']}", "--out", str(reports / f"{name}.atlas.md"),
                    "--json", str(reports / f"{name}.atlas.json"), env=env)
        meta = {k: spec[k] for k in ("backend", "module", "device")}
        meta.update(command=vendor_command(name), wall_s=round(wall),
                    coverage=(coverage or "").strip().splitlines()[-1])
        session.run("python", "-c", VENDOR_META, spec["module"], str(reports / f"{name}.meta.json"),
                    json.dumps(meta), env=env)
    run = json.loads((reports / f"{name}.json").read_text()).get("run", {})
    if run.get("exitstatus") not in (0, None) or run.get("status") != "completed":
        session.error(f"the {name} run is not green: {run.get('status')}, exit status "
                      f"{run.get('exitstatus')} (reports/vendors/{name}.md)")
