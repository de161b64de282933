"""docs/library-guide.md walked literally: its files written as the page shows them into an
empty folder, its commands run there with the plain ``pytest`` command, and what they print
compared with the figures the page gives (the summary each ``ends with``, and a ``text``
block after a command: a line its output holds). Each shape's example then fails when a bug
is planted into its library file, or its shape's field is left out of its declaration."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import children

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "library-guide.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)
TEXT = GUIDE.read_text(encoding="utf-8")
#: the outcomes pytest's last line counts, in its order
OUTCOMES = ("failed", "passed", "skipped")


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(TEXT) if lang == language]


def _commands() -> list[tuple[str, str, list[str]]]:
    """Each command of the page, the summary it ends with, and the text blocks after it."""
    found: list[tuple[str, str, list[str]]] = []
    ends = iter(re.findall(r"ends with `([^`]+)`", TEXT))
    for lang, body in FENCE.findall(TEXT):
        if lang == "bash":
            found += [(line, next(ends), []) for line in body.splitlines()
                      if line.startswith("pytest ")]
        elif lang == "text" and found:
            found[-1][2].append(body.strip())
    assert next(ends, None) is None, "an 'ends with' without its command"
    return found


COMMANDS = _commands()


def _write_files(folder: Path, change: dict[str, tuple[str, str]] | None = None) -> None:
    """The page's ``mylib`` files into ``folder``; ``change``: file -> (old, new) text."""
    for body in _blocks("python"):
        name = body.splitlines()[0].removeprefix("# ")
        if not name.startswith("mylib/"):
            continue
        if change and name in change:
            old, new = change[name]
            assert old in body, (name, old)
            body = body.replace(old, new)
        path = folder / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(body, encoding="utf-8")


def _run(command: str, folder: Path, bin_folder: Path | None = None) -> tuple[int, str, str]:
    """Run ``command`` in ``folder``, ``bin_folder`` (default: this interpreter's) first on
    PATH; its exit code, output and outcome summary."""
    first = os.pathsep.join(str(f) for f in dict.fromkeys([bin_folder or Path(sys.executable).parent,
                                                           Path(sys.executable).parent]))
    env = {**os.environ, "PATH": f"{first}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(["bash", "-c", f"{command} -p no:cacheprovider"], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    last = re.findall(r"=+ (.* in [\d.]+s.*) =+", out)
    counts = dict((kind, n) for n, kind in re.findall(r"(\d+) (\w+)", last[-1] if last else ""))
    summary = ", ".join(f"{counts[k]} {k}" for k in OUTCOMES if k in counts)
    return proc.returncode, out, summary


@pytest.fixture(scope="module")
def guide_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("guide")
    _write_files(folder)
    return folder


@pytest.fixture(scope="module")
def shell_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's ``pytest``: this interpreter's, its runs forked from the tests' zygote."""
    return children.on_path(tmp_path_factory.mktemp("bin"))


def test_the_page_shows_every_shape_with_its_files_and_commands():
    files = [b.splitlines()[0] for b in _blocks("python") if b.startswith("# mylib/")]
    assert files[:2] == ["# mylib/__init__.py", "# mylib/amp_decl.py"]
    for shape in ('ending="region"', 'before="input"', "arguments=(None, torch.float32)",
                  "RegionRunner(", "functools.partial", 'core="input"', "ForwardDecorator("):
        assert any(shape in b for b in _blocks("python")), shape
    assert len(COMMANDS) == 7, [c for c, _, _ in COMMANDS]
    assert any("--fake" in c for c, _, _ in COMMANDS[2:]), "the shapes on a fake device"


@pytest.mark.slow
@pytest.mark.parametrize("command,want,shown", COMMANDS,
                         ids=[f"command{i}" for i in range(len(COMMANDS))])
def test_the_library_guide_runs_as_printed(guide_folder, shell_bin, command, want, shown):
    code, out, summary = _run(command, guide_folder, shell_bin)
    assert summary == want, (want, out[-3000:])
    assert code == (1 if "failed" in want else 0), out[-3000:]
    flat = " ".join(out.split())
    for text in shown:
        assert " ".join(text.split()) in flat, (text, out[-3000:])


_SHAPES = ("--wrapper mylib.kernels_decl:CORRELATE --wrapper mylib.attention_decl:ATTENTION "
           "--wrapper mylib.rotary_decl:ROTATE --wrapper mylib.trainer_decl:TRAIN_STEP "
           "--wrapper mylib.norm_decl:NORM --wrapper mylib.functions_decl:FORWARD")
#: one bug per library file of the page, each in its shape's part (the guide names them)
BUGS = {
    "mylib/kernels.py": ("        x = noise.float()\n        gram = x @ x.mT",
                         "        x = noise.float()\n        gram = (noise @ noise.mT).float()"),
    "mylib/attention.py": ("q = q - q.mean(-1, keepdim=True)",
                           "q = q - torch.nn.functional.linear(q, torch.full((q.shape[-1],) * 2,"
                           " 1 / q.shape[-1], device=q.device))"),
    "mylib/rotary.py": ("        xf = x.float()\n",
                        "        xf = x.float()\n        freqs = freqs.to(x.dtype)\n"),
    "mylib/trainer.py": (
        "    with torch.autocast(x.device.type, dtype=_DTYPES[precision]):\n"
        "        loss = torch.nn.functional.mse_loss(model(x).float(), y)\n",
        "    region = torch.autocast(x.device.type, dtype=_DTYPES[precision])\n"
        "    region.__enter__()\n"
        "    loss = torch.nn.functional.mse_loss(model(x).float(), y)\n"
        "    region.__exit__(None, None, None)\n"),
    "mylib/norm.py": ("ms = x.pow(2).mean(-1, keepdim=True)",
                      "ms = x.float().pow(2).mean(-1, keepdim=True).to(x.dtype)"),
    "mylib/functions.py": ('custom_bwd = functools.partial(torch.amp.custom_bwd, device_type="cpu")',
                           "custom_bwd = lambda fn: fn"),
}
#: each wrapper's failed items with a bug planted, and words of the failure
CAUGHT = {
    "mylib.correlate": ({"float32", "nesting"}, "aten.mm.default computed in bfloat16, not "
                        "float32 (before its float32 core ended)"),
    "mylib.self_attention_weights": ({"float32", "nesting"}, "inputs in float32: "
                                     "aten.mm.default computed in bfloat16, not float32 "
                                     "(before its float32 core)"),
    "mylib.rotate": ({"float32", "nesting"}, "aten.cos.default computed in bfloat16, not "
                     "float32"),
    "mylib.train_step": ({"restored"}, "after the body raised"),
    "mylib.rms_norm": ({"float32", "nesting"}, "aten.pow.Tensor_Scalar computed in float32, "
                       "not bfloat16"),
    "mylib.custom_fwd": ({"backward"}, "backward called outside any region ran with (False"),
}


def _failed(out: str) -> dict[str, set[str]]:
    """wrapper -> the checks of its failed items, from pytest's short summary."""
    failed: dict[str, set[str]] = {}
    for wrapper, check in re.findall(r"FAILED \S+\[cpu-(?:\w+-)?(mylib\.\w+)-(?:\w+-)?(\w+)\]",
                                     out):
        failed.setdefault(wrapper, set()).add(check)
    return failed


@pytest.mark.slow
def test_each_shape_fails_when_a_bug_is_planted_into_its_library(tmp_path, shell_bin):
    _write_files(tmp_path, BUGS)
    code, out, _ = _run(f"pytest --pyargs amp_conformance --device cpu {_SHAPES} -k wrapper "
                        "-rf", tmp_path, shell_bin)
    assert code == 1
    assert _failed(out) == {w: checks for w, (checks, _) in CAUGHT.items()}, out[-3000:]
    for wrapper, (_, words) in CAUGHT.items():
        assert re.search(rf"wrapper {re.escape(wrapper)} .*\n.*{re.escape(words)}", out), \
            (wrapper, words)


UNDECLARED = '''import dataclasses

from mylib.attention_decl import ATTENTION
from mylib.kernels_decl import CORRELATE
from mylib.norm_decl import NORM
from mylib.rotary_decl import ROTATE

WRAPPERS = [dataclasses.replace(CORRELATE, name="mylib.no_ending", ending=None),
            dataclasses.replace(ATTENTION, name="mylib.no_before", before=None),
            dataclasses.replace(ROTATE, name="mylib.no_arguments", arguments=()),
            dataclasses.replace(NORM, name="mylib.no_core", core="float32")]
'''


@pytest.mark.slow
def test_each_island_fails_without_its_shape_declared(tmp_path, shell_bin):
    """What the page says of each island declared without its shape's field."""
    _write_files(tmp_path)
    (tmp_path / "mylib" / "undeclared_decl.py").write_text(UNDECLARED, encoding="utf-8")
    code, out, _ = _run("pytest --pyargs amp_conformance --device cpu --wrapper "
                        "mylib.undeclared_decl:WRAPPERS -k 'wrapper and (float32 or nesting)' "
                        "-rf", tmp_path, shell_bin)
    assert code == 1
    assert _failed(out) == dict.fromkeys(("mylib.no_ending", "mylib.no_before",
                                          "mylib.no_arguments", "mylib.no_core"),
                                         {"float32", "nesting"}), \
        out[-3000:]
