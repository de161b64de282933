"""Walk a guide's commands literally, from an empty folder, and record what they print.

    python -m amp_conformance.tools.guide_walk vendor --from-clone --record docs/data/vendor-guide.json
    python -m amp_conformance.tools.guide_walk quickstart --record docs/data/quickstart.json

``vendor`` runs the bash block of docs/vendor-guide.md's "A first run, step by step" in one
shell, line by line as printed, in an empty folder with ``AMP_CONFORMANCE`` naming this
checkout. ``quickstart`` clones the checkout's committed tree into an empty folder, makes a
virtualenv there and runs docs/quickstart.md's install and test commands in it, then the
installed suite from another empty folder, serial and with ``-n 2``.

Step 1 of the vendor guide makes an environment (a virtualenv, torch, the suite's wheel).
``--environment`` runs it as printed, ``~`` a folder of the walk; ``--from-clone`` also
makes ``AMP_CONFORMANCE`` a fresh clone of this checkout's committed tree (what the pages'
records come from: never the working tree's uncommitted changes). Without either, the
commands that make the environment are left out and the walk uses this interpreter's, where
the suite is installed, as the project's tests do (the record says which).

Each record holds the machine it ran on (CPU model, capability, cores, load, torch), the
commit, every step's command, exit status, wall time and output, and
:func:`amp_conformance.tools.figures.vendor_values` (or ``quickstart_values``) reads the
figures the pages print from it. A record replaces the
one of the same walk, CPU capability and torch in the file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR_GUIDE = ROOT / "docs" / "vendor-guide.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
VENDOR_HEADING = "## A first run, step by step"
#: the vendor guide's commands that make the environment (step 1)
ENVIRONMENT = re.compile(r"^(python -m venv |\. \S+/bin/activate|python -m pip )")
#: the output kept of a long step: its last lines
KEEP_LINES = 400


def machine() -> dict[str, object]:
    """What a time was taken on: the CPU's model, capability and cores, torch, Python, and
    the load average when it started (what else the machine ran)."""
    import torch

    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "capability": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(), "load": round(os.getloadavg()[0], 1),
            "torch": torch.__version__,
            "python": ".".join(map(str, sys.version_info[:3]))}


def describe(host: dict) -> str:
    """``AMD EPYC, 2 cores (load 1.2), AVX512, torch 2.13.0+cpu``: a record's machine in
    words, with the load average when the walk started (other work on the machine)."""
    load = f" (load {host['load']})" if "load" in host else ""
    return (f"{host['cpu']}, {host['cores']} cores{load}, {host['capability']}, "
            f"torch {host['torch']}")


def bash_blocks(page: Path, heading: str | None = None) -> list[list[str]]:
    """The commands of each ``bash`` block of ``page`` (under ``heading`` up to the next
    heading of its level, where given): continuation lines joined, comment lines and
    trailing comments left out."""
    text = page.read_text(encoding="utf-8")
    if heading is not None:
        start = text.index(heading + "\n")
        level = heading.split(" ")[0]
        nxt = re.search(rf"^{level} ", text[start + len(heading):], re.M)
        text = text[start:start + len(heading) + nxt.start()] if nxt else text[start:]
    blocks = []
    for body in re.findall(r"```bash\n(.*?)```", text, re.S):
        commands, parts = [], []
        for raw in body.splitlines():
            line = raw.strip()
            if not parts and (not line or line.startswith("#")):
                continue
            parts.append(line.removesuffix("\\").strip())
            if not line.endswith("\\"):
                commands.append(re.sub(r"\s+#\s.*$", "", " ".join(parts)))
                parts = []
        blocks.append(commands)
    return blocks


def run_script(commands: list[str], cwd: Path, env: dict[str, str],
               timeout: int = 3600) -> list[dict]:
    """Run ``commands`` in one bash shell, in order, each timed: ``[{command, rc, seconds,
    output}]`` (stdout and stderr together)."""
    lines = []
    for i, command in enumerate(commands):
        lines += [f'echo "@@step {i}"', "t0=$EPOCHREALTIME", command,
                  f'echo "@@end {i} $? $t0 $EPOCHREALTIME"']
    done = subprocess.run(["bash", "-c", "\n".join(lines)], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    steps, out = [], done.stdout
    for i, command in enumerate(commands):
        found = re.search(rf"@@step {i}\n(.*?)@@end {i} (\d+) ([\d.]+) ([\d.]+)\n", out, re.S)
        if found is None:
            steps.append({"command": command, "rc": None, "seconds": None,
                          "output": out.split(f"@@step {i}\n", 1)[-1][-8000:]})
            break
        body, rc, t0, t1 = found.groups()
        kept = body.splitlines()[-KEEP_LINES:]
        steps.append({"command": command, "rc": int(rc),
                      "seconds": round(float(t1) - float(t0), 1), "output": "\n".join(kept)})
    return steps


def clean_env(path_first: Path | None = None) -> dict[str, str]:
    """The caller's environment without what would change a pytest run (PYTEST_ADDOPTS,
    PYTHONPATH), with ``path_first`` (an interpreter's bin folder) first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTHONPATH", "VIRTUAL_ENV")}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


def vendor_commands(environment: bool) -> list[str]:
    """The vendor guide's first-run commands, as printed (without those of step 1 unless
    ``environment``)."""
    commands = bash_blocks(VENDOR_GUIDE, VENDOR_HEADING)[0]
    return commands if environment else [c for c in commands if not ENVIRONMENT.match(c)]


def walk_vendor(folder: Path, environment: bool = False, from_clone: bool = False,
                python: Path | None = None) -> dict:
    """The vendor guide's first run in ``folder`` (empty): its steps, and where. With
    ``from_clone``, ``AMP_CONFORMANCE`` is a fresh clone of this checkout's committed tree and
    step 1 runs (the suite under walk is the clone's wheel); else the walk's ``python`` is
    ``python`` (default: this interpreter), its folder first on PATH, then this one's."""
    environment = environment or from_clone
    env = clean_env(None if environment else Path(sys.executable).parent)
    if python is not None and not environment:
        env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    env["AMP_CONFORMANCE"] = str(ROOT)
    if from_clone:
        env["AMP_CONFORMANCE"] = str(folder / "amp-conformance")
        subprocess.run(["git", "clone", "-q", str(ROOT), env["AMP_CONFORMANCE"]], check=True)
    if environment:
        env["HOME"] = str(folder / "home")
        (folder / "home").mkdir()
        if shutil.which("python", path=env.get("PATH")) is None:  # python3 alone: the base
            (folder / "bin").mkdir()
            (folder / "bin" / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
            env["PATH"] = f"{folder / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = folder / "work"
    work.mkdir()
    steps = run_script(vendor_commands(environment), work, env)
    where = ("a fresh clone's wheel in a fresh virtualenv, as step 1 says" if from_clone else
             "a fresh virtualenv, as step 1 says" if environment else
             "the walker's interpreter (step 1 left out)")
    return {"walk": "vendor", "page": "docs/vendor-guide.md", "environment": where,
            "steps": steps,
            "reports": {name: digest(work / "reports" / f"{name}.json")
                        for name in ("draft", "mydev")},
            "drafted": {name: _text(work / "declared" / name)
                        for name in ("capabilities.toml", "xfail.txt")}}


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def digest(path: Path) -> dict | None:
    """What the pages count in a report: its summary, each failed item's id, each expected
    failure's id with where it was declared (an expected-failures file, or the suite's
    record of a PyTorch defect)."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    short = [(r["nodeid"].rsplit("/", 1)[-1], r) for r in data["results"]]
    return {"summary": data["summary"],
            "failed": [n for n, r in short if r["outcome"] in ("failed", "error")],
            "xfailed": [[n, declared_in(r["message"])] for n, r in short
                        if r["outcome"] == "xfailed"]}


def declared_in(message: str | None) -> str:
    """Where an expected failure was declared: the file its reason names (``[PATH:LINE]``,
    as a basename), else ``suite`` (a defect of PyTorch's that the suite records)."""
    first = (message or "").splitlines()[0] if message else ""
    found = re.search(r"\[(?:[^\]]*/)?([^/\]]+):\d+\]", first)
    return found.group(1) if found else "suite"


def quickstart_commands() -> tuple[list[str], list[str]]:
    """docs/quickstart.md's commands run in the clone (install, then the first run), and the
    installed suite's command run from an empty folder (serial, then with ``-n 2``)."""
    blocks = bash_blocks(QUICKSTART, "## Install") + bash_blocks(QUICKSTART, "## A first run on CPU")
    install, first, anywhere = blocks[0], blocks[1], blocks[2]
    return [*install, *first], [anywhere[0], f"{anywhere[0]} -n 2"]


def walk_quickstart(folder: Path) -> dict:
    """The quickstart from a fresh clone of this checkout's committed tree: a virtualenv,
    its install commands, its test command; then the installed suite from an empty folder."""
    clone, empty = folder / "clone", folder / "anywhere"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    empty.mkdir()
    env = clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    env["PATH"] = f"{folder / 'venv' / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(folder / "venv")
    in_clone, from_anywhere = quickstart_commands()
    steps = run_script(in_clone, clone, env)
    steps += run_script(from_anywhere, empty, env)
    return {"walk": "quickstart", "page": "docs/quickstart.md",
            "environment": "a fresh virtualenv in a fresh clone", "steps": steps}


def commit(working_tree: bool = False) -> str:
    """This checkout's commit; with ``working_tree`` (what runs is the checkout's own files,
    not a clone's), ``<commit>+changes`` where the package or the op lists differ from it."""
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True)
    head = done.stdout.strip() or "unknown"
    if working_tree:
        changed = subprocess.run(["git", "status", "--porcelain", "--", "amp_conformance",
                                  "oplists"], cwd=ROOT, text=True, capture_output=True)
        head += "+changes" if changed.stdout.strip() else ""
    return head


def record(walked: dict, host: dict, head: str) -> dict:
    """A walk with the machine (``host``) and commit (``head``) it began on, and the date."""
    return {**walked, "machine": host, "commit": head,
            "date": datetime.date.today().isoformat()}


def store(path: Path, new: dict) -> None:
    """Put ``new`` into the record file at ``path``, replacing the record of the same walk,
    capability and torch (the first record is the one the page quotes)."""
    records = json.loads(path.read_text(encoding="utf-8"))["records"] if path.exists() else []
    key = (new["walk"], new["machine"]["capability"], new["machine"]["torch"])
    same = [i for i, r in enumerate(records)
            if (r["walk"], r["machine"]["capability"], r["machine"]["torch"]) == key]
    if same:
        records[same[0]] = new
    else:
        records.append(new)
    path.write_text(json.dumps({"records": records}, indent=1) + "\n", encoding="utf-8")


def failed_step(walked: dict) -> dict | None:
    """The step that keeps a walk's figures off the pages, or None: a quickstart step that
    failed, or the vendor guide's last run (its first fails by design) not green."""
    steps = walked["steps"] if walked["walk"] == "quickstart" else walked["steps"][-1:]
    return next((s for s in steps if s["rc"] != 0), None)


def unrecordable(walked: dict) -> str | None:
    """Why a walk's figures may not become a page's, or None (:func:`failed_step`)."""
    failed = failed_step(walked)
    return failed and f"{failed['command']!r} exited {failed['rc']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_conformance.tools.guide_walk",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("walk", choices=("vendor", "quickstart"))
    parser.add_argument("--record", type=Path, help="the record file to put the walk into")
    parser.add_argument("--environment", action="store_true",
                        help="vendor: run step 1 (a fresh virtualenv) as printed too")
    parser.add_argument("--from-clone", action="store_true",
                        help="vendor: AMP_CONFORMANCE a fresh clone of the committed tree "
                        "(implies --environment)")
    args = parser.parse_args(argv)
    # as the walk begins; a clone is of this commit, else the checkout's files run
    in_clone = args.walk == "quickstart" or args.from_clone
    host, head = machine(), commit(working_tree=not in_clone)
    with tempfile.TemporaryDirectory(prefix=f"walk-{args.walk}-") as tmp:
        walked = (walk_vendor(Path(tmp), args.environment, args.from_clone)
                  if args.walk == "vendor"
                  else walk_quickstart(Path(tmp)))
    done = record(walked, host, head)
    for step in done["steps"]:
        print(f"[rc {step['rc']}, {step['seconds']} s] {step['command']}")
        print("    " + (step["output"].strip().splitlines() or [""])[-1])
    failed = failed_step(done)
    if args.record and failed:
        print(f"--- the last lines of {failed['command']!r} ---\n{failed['output']}")
        print(f"guide_walk: not recorded: {unrecordable(done)}")
        return 1
    if args.record:
        store(args.record, done)
        print(f"guide_walk: recorded in {args.record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
