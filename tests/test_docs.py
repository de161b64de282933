"""The manual's commands parse and its links resolve: README.md and every docs/*.md page.

Every line of a fenced ``bash``, ``sh`` or ``console`` block is a command (a trailing
backslash joins the next line; in ``console`` only the lines after ``$ ``). Each command is
checked by its own parser and never run:

- ``python -m amp_conformance …``, ``python -m amp_conformance.<module> …`` and
  ``python benchmarks/<script>.py …``: the program's own ``main()``, stopped once argparse
  has parsed (``stop_after_parsing``); the pytest arguments of ``run`` and of the benchmarks
  are checked as pytest's below;
- ``pytest …`` and ``python -m pytest …``: every option is one that ``pytest --help`` lists
  with the suite's plugin, pytest-xdist and pytest-timeout loaded (one subprocess per
  session), with a value where it takes one, among its choices where it has some;
- ``nox …``: nox's own parser, and every ``-s`` session and ``-t`` tag is one ``nox --list``
  shows for noxfile.py;
- set-up shell (``cd``, ``pip install``, ``python -m venv``, ``. venv/bin/activate`` …) is
  allowed by name (``SHELL``). Any other command fails, naming its page and line.

Every relative link ``[text](path)`` outside code names a file or folder that exists, and its
``#anchor`` a heading of the Markdown page it names. docs/options.md's option table is the
one ``amp_conformance.plugin.options`` generates.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

from amp_conformance.plugin import options

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCES = {"bash", "sh", "console"}
#: plain shell a page may show, by program (and, where given, its first argument)
SHELL: dict[str, set[str] | None] = {
    "cd": None, "cp": None, "sed": None, "export": None, "cat": None, "mkdir": None,
    "pip": {"install", "wheel"}, "git": {"clone"},
}
#: ``python -m X`` programs that are set-up, not checked further
PYTHON_SHELL_MODULES = {"pip": {"install", "wheel"}, "venv": None}
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTIONS = {">", ">>", "<", ">&", "&>"}


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def fenced_commands(path: Path) -> list[Command]:
    """The commands of a page's shell blocks, continuation lines joined."""
    page = path.relative_to(ROOT).as_posix()
    found: list[Command] = []
    fence: tuple[str, str] | None = None
    start, parts = 0, []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if fence is None:
            opened = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", line)
            if opened:
                fence = (opened.group(1), opened.group(2).lower())
            continue
        if line.startswith(fence[0]) and not line.strip(fence[0][0]):
            fence = None
            continue
        if fence[1] not in FENCES:
            continue
        if fence[1] == "console" and not parts:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if not parts:
            start = number
        parts.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            text = " ".join(p for p in parts if p)
            parts = []
            if text and not text.startswith("#"):
                found.append(Command(page, start, text))
    return found


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line: split at ``&&``, ``|``, ``;`` …, without
    redirections, comments and leading variable assignments. A placeholder ``<device>``
    stands as ``DEVICE``."""
    text = re.sub(r"<([\w.:-]+)>", lambda m: m.group(1).upper(), text)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    tokens = iter(list(lexer))
    for token in tokens:
        if token in OPERATORS:
            commands.append([])
        elif token in REDIRECTIONS:
            next(tokens, None)
        else:
            commands[-1].append(token)
    result = []
    for argv in commands:
        while argv and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[0]):
            argv = argv[1:]
        if argv:
            result.append(argv)
    return result


# -- argparse programs, parsed and stopped ---------------------------------------------


class Parsed(Exception):
    """Raised by ``stop_after_parsing`` with what the outermost parse returned."""

    def __init__(self, namespace: argparse.Namespace | None, extras: list[str]):
        super().__init__()
        self.namespace, self.extras = namespace, extras


class CommandError(Exception):
    pass


@contextlib.contextmanager
def stop_after_parsing() -> Iterator[None]:
    """Make ArgumentParser's outermost ``parse_args``/``parse_known_args`` raise ``Parsed``
    with its result instead of returning: a program's ``main()`` parses, then stops."""
    depth = 0

    def outermost(method: Callable) -> Callable:
        def parse(self, args=None, namespace=None):
            nonlocal depth
            depth += 1
            try:
                result = method(self, args, namespace)
            finally:
                depth -= 1
            if depth == 0:
                raise Parsed(*(result if isinstance(result, tuple) else (result, [])))
            return result
        return parse

    cls = argparse.ArgumentParser
    with mock.patch.object(cls, "parse_args", outermost(cls.parse_args)), \
            mock.patch.object(cls, "parse_known_args", outermost(cls.parse_known_args)):
        yield


def parse_with(program: str, run: Callable[[], object], argv: list[str]) -> Parsed:
    """Run ``run`` (a program's main) with ``sys.argv`` set, until it has parsed ``argv``;
    ``--help`` parses as nothing. A parse error raises CommandError with argparse's words."""
    err = io.StringIO()
    with stop_after_parsing(), mock.patch.object(sys, "argv", [program, *argv]), \
            contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            run()
        except Parsed as parsed:
            return parsed
        except SystemExit as exc:
            if exc.code in (0, None):
                return Parsed(None, [])
            words = err.getvalue().strip().splitlines() or [f"exit status {exc.code}"]
            raise CommandError(words[-1]) from None
    raise CommandError(f"{program} returned without parsing its arguments")


def check_amp_conformance(argv: list[str], pytest_options: dict) -> None:
    from amp_conformance import __main__ as cli

    parsed = parse_with("python -m amp_conformance", lambda: cli.main(argv), argv)
    if parsed.extras:  # main() parses the known arguments, then refuses the rest
        raise CommandError(f"unrecognized arguments: {' '.join(parsed.extras)}")
    pytest_args = getattr(parsed.namespace, "pytest_args", None) or []
    check_pytest(pytest_args[1:] if pytest_args[:1] == ["--"] else pytest_args,
                 pytest_options)


def check_module(name: str, argv: list[str]) -> None:
    """``python -m amp_conformance.<module>``: its ``main()``, or a module whose ``__main__``
    block takes no arguments."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise CommandError(f"no module {name}: {exc}") from None
    main = getattr(module, "main", None)
    if main is None:
        if argv or '__name__ == "__main__"' not in inspect.getsource(module):
            raise CommandError(f"{name} takes no arguments from the command line")
        return
    parsed = parse_with(f"python -m {name}", main, argv)
    if parsed.extras:
        raise CommandError(f"unrecognized arguments: {' '.join(parsed.extras)}")


def check_script(path: str, argv: list[str], pytest_options: dict) -> None:
    """``python benchmarks/X.py``: the script run as ``__main__`` until it has parsed; what
    it passes on (``parse_known_args``) are pytest arguments."""
    script = ROOT / path
    if not script.is_file():
        raise CommandError(f"no script {path}")
    before = set(sys.modules)
    with mock.patch.object(sys, "path", [str(script.parent), *sys.path]):
        try:
            parsed = parse_with(path, lambda: runpy.run_path(str(script), run_name="__main__"),
                                argv)
        finally:  # the script's sibling modules (benchmarks/*.py) leave with it
            for name in set(sys.modules) - before:
                if str(getattr(sys.modules[name], "__file__", "")).startswith(str(script.parent)):
                    del sys.modules[name]
    check_pytest([a for a in parsed.extras if a != "--"], pytest_options)


# -- pytest -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    takes_value: bool
    choices: tuple[str, ...] = ()


def pytest_options_from_help(text: str) -> dict[str, Option]:
    """Every option ``pytest --help`` lists: ``-n numprocesses, --numprocesses=…``."""
    found: dict[str, Option] = {}
    for line in text.splitlines():
        spec = re.match(r"  (-\S.*?)(?:\s{2,}|$)", line)
        if not spec:
            continue
        for part in spec.group(1).split(", "):
            name, _, value = part.replace("=", " ", 1).partition(" ")
            choices = tuple(value[1:-1].split(",")) if value.startswith("{") else ()
            found[name] = Option(bool(value), choices)
    return found


def check_pytest(argv: list[str], known: dict[str, Option]) -> None:
    problems = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            option = known.get(name)
            if option is None:
                problems.append(f"pytest knows no option {name}")
            elif option.takes_value and not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if option and option.choices and value not in option.choices:
                problems.append(f"{name} {value!r}: not one of {', '.join(option.choices)}")
        elif arg.startswith("-") and len(arg) > 1:
            option = known.get(arg[:2])
            if option is None:
                problems.append(f"pytest knows no option {arg[:2]}")
            elif option.takes_value:
                i += len(arg) == 2
            else:
                problems += [f"pytest knows no flag -{c}" for c in arg[2:]
                             if not (known.get(f"-{c}") and not known[f"-{c}"].takes_value)]
        i += 1
    if problems:
        raise CommandError("; ".join(problems))


@pytest.fixture(scope="session")
def pytest_options(tmp_path_factory) -> dict[str, Option]:
    """What ``pytest --help`` lists from an empty folder, with this checkout's package."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    shown = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True,
                           text=True, cwd=tmp_path_factory.mktemp("help"), env=env,
                           timeout=300)
    assert shown.returncode == 0, shown.stdout[-2000:] + shown.stderr[-2000:]
    known = pytest_options_from_help(shown.stdout)
    for name in ("--amp-device", "--device", "--numprocesses", "--timeout", "-k"):
        assert name in known, f"pytest --help lacks {name}: a plugin did not load"
    return known


# -- nox --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def nox_sessions() -> tuple[set[str], set[str]]:
    """The session names (``cpu(2.13)`` and ``cpu``) and tags that ``nox --list`` shows."""
    pytest.importorskip("nox", reason="nox is a dev extra: pip install -e '.[dev]'")
    listed = subprocess.run([sys.executable, "-m", "nox", "--list", "-f",
                             str(ROOT / "noxfile.py")], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names, tags = set(), set()
    for session, tagged in re.findall(r"(?m)^[*-] (\S+)(?: \[([^\]]*)\])?", listed.stdout):
        names |= {session, session.split("(")[0]}
        tags |= set(filter(None, tagged.split(",")))
    assert "drift" in names and "matrix" in tags, listed.stdout
    return names, tags


def check_nox(argv: list[str], sessions: tuple[set[str], set[str]]) -> None:
    """nox's own parser (it returns its config: nothing runs), then the sessions and tags."""
    nox_options = pytest.importorskip("nox._options").options
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            config = nox_options.parse_args(argv)
        except SystemExit as exc:
            if exc.code in (0, None):
                return
            raise CommandError(err.getvalue().strip().splitlines()[-1]) from None
    names, tags = sessions
    unknown = [f"no session {s}" for s in config.sessions or () if s not in names]
    unknown += [f"no tag {t}" for t in config.tags or () if t not in tags]
    if unknown:
        raise CommandError("; ".join(unknown))


# -- one command ------------------------------------------------------------------------


def check_shell(argv: list[str]) -> bool:
    """Whether ``argv`` is set-up shell that SHELL allows."""
    program = argv[0]
    if program in (".", "source"):
        return len(argv) == 2 and argv[1].endswith("bin/activate")
    if program not in SHELL:
        return False
    subcommands = SHELL[program]
    return subcommands is None or (len(argv) > 1 and argv[1] in subcommands)


def check(argv: list[str], pytest_options: dict, sessions) -> None:
    """Check one simple command; raise CommandError naming what is wrong."""
    program, args = argv[0], argv[1:]
    if program == "pytest":
        return check_pytest(args, pytest_options)
    if program == "nox":
        return check_nox(args, sessions)
    if program in ("python", "python3") and args[:1] == ["-m"] and len(args) > 1:
        module, rest = args[1], args[2:]
        if module == "pytest":
            return check_pytest(rest, pytest_options)
        if module == "nox":
            return check_nox(rest, sessions)
        if module == "amp_conformance":
            return check_amp_conformance(rest, pytest_options)
        if module.startswith("amp_conformance."):
            return check_module(module, rest)
        if module in PYTHON_SHELL_MODULES:
            allowed = PYTHON_SHELL_MODULES[module]
            if allowed is None or rest[:1] and rest[0] in allowed:
                return None
    if program in ("python", "python3") and args and re.fullmatch(r"benchmarks/\w+\.py", args[0]):
        return check_script(args[0], args[1:], pytest_options)
    if check_shell(argv):
        return None
    raise CommandError(f"no check knows this kind of command ({shlex.join(argv[:3])} …): "
                       "add one to tests/test_docs.py, or show it as text")


COMMANDS = [command for page in PAGES for command in fenced_commands(page)]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.page}:{c.line}")
def test_every_documented_command_parses(command, pytest_options, nox_sessions):
    for argv in simple_commands(command.text):
        try:
            check(argv, pytest_options, nox_sessions)
        except CommandError as exc:
            pytest.fail(f"{command}\n  {exc}", pytrace=False)


def test_the_pages_have_commands_to_check():
    pages = {c.page for c in COMMANDS}
    assert {"README.md", "docs/quickstart.md", "docs/vendor-guide.md", "docs/faults.md",
            "docs/versions.md", "docs/selftest.md"} <= pages, pages


# -- the checker itself -----------------------------------------------------------------


@pytest.mark.parametrize("text, words", [
    ("pytest --device cuda --no-such-option", "pytest knows no option --no-such-option"),
    ("pytest --numerics sloppy", "--numerics 'sloppy': not one of"),
    ("python -m amp_conformance coverage --device cpu --wrong", "unrecognized arguments"),
    ("python -m amp_conformance nosuch", "invalid choice"),
    ("python -m amp_conformance run -- --device cpu -Z", "pytest knows no option -Z"),
    ("python benchmarks/gpu_check.py --nope", "unrecognized arguments"),
    ("python benchmarks/suite_speed.py --repeat 3 --devcie cpu", "no option --devcie"),
    ("nox -s no-such-session", "no session no-such-session"),
    ("nox -t no-such-tag", "no tag no-such-tag"),
    ("rm -rf reports", "no check knows this kind of command"),
    ("cd x && make", "no check knows this kind of command"),
])
def test_a_wrong_command_fails_with_its_reason(text, words, pytest_options, nox_sessions):
    with pytest.raises(CommandError, match=re.escape(words)):
        for argv in simple_commands(text):
            check(argv, pytest_options, nox_sessions)


def test_commands_are_split_as_the_shell_does(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n```bash\nA=1 pytest -n 2 \\\n    -q   # two workers\n```\n"
                    "```console\n$ nox --list\noutput line\n```\n```toml\nx = 1\n```\n")
    with mock.patch(f"{__name__}.ROOT", tmp_path):
        found = fenced_commands(page)
    assert [(c.line, c.text) for c in found] == [(3, "A=1 pytest -n 2 -q   # two workers"),
                                                 (7, "nox --list")]
    assert simple_commands(found[0].text) == [["pytest", "-n", "2", "-q"]]
    assert simple_commands('cat r/*.md >> "$OUT" && pytest --device <device>') == [
        ["cat", "r/*.md"], ["pytest", "--device", "DEVICE"]]


# -- links ------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        heading = re.match(r"#{1,6} (.+)", line)
        if heading and not in_fence:
            base = slug(heading.group(1))
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of each Markdown link outside code."""
    found, in_fence = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        found += [(number, t) for t in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)]
    return found


def broken_links(page: Path) -> list[str]:
    """``line: target: why`` of each relative link that names no file or folder, or no
    heading of the Markdown page it names."""
    broken = []
    for number, target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{number}: {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{number}: {target}: no heading #{anchor} there")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(broken)


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The compiled tier (`--amp-compile`)\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n[a](other.md#the-compiled-tier---amp-compile) [b](missing.md)\n"
                    "[c](other.md#nowhere) [d](#page) [e](https://example.org/x.md)\n"
                    "`[f](in-code.md)`\n```\n[g](in-a-block.md)\n```\n")
    assert broken_links(page) == ["2: missing.md: no such file",
                                  "3: other.md#nowhere: no heading #nowhere there"]


# -- the generated option table ---------------------------------------------------------


def test_the_options_page_is_generated_from_the_option_table():
    from amp_conformance.core import generated

    doc = ROOT / "docs" / "options.md"
    section = generated.section(doc.read_text(encoding="utf-8"), options.BEGIN, options.END)
    assert section is not None, f"{doc} lost its generated markers ({options.BEGIN})"
    assert section == options.options_markdown(), (
        "docs/options.md's table differs from amp_conformance/plugin/options.py; regenerate "
        "it with: python -c 'from pathlib import Path; from amp_conformance.plugin import "
        "options; options.write(Path(\"docs/options.md\"))'")


def test_the_option_table_shows_every_option_and_alias():
    table = options.options_markdown()
    for name in [*options._OPTIONS, *options.ALIASES]:
        assert f"`{name}`" in table, name
