"""``python -m amp_conformance <command>``: the suite's command-line tools.

Each command lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only lists them, so adding one is one line here.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys

#: command name -> (module, one-line help)
COMMANDS = {
    "atlas": ("amp_conformance.tools.atlas",
              "what autocast does to every op of PyTorch's op_db on cpu, cuda, xpu and mps"),
    "coverage": ("amp_conformance.tools.coverage",
                 "which overloads of a device's autocast policy the op lists exercise"),
    "discover": ("amp_conformance.tools.discover",
                 "observe a device's autocast policy on a reference device's op lists; write "
                 "it as an op list"),
    "drift": ("amp_conformance.tools.drift",
              "what changed between two conformance reports (policy, availability, messages)"),
    "matrix": ("amp_conformance.tools.matrix",
               "the torch-version matrix table of docs/versions.md from reports/<release>/"),
    "review": ("amp_conformance.tools.review",
               "list the departures discover left in an op list, grouped (the reference's "
               "expectation beside the device's behaviour); accept or keep per group or entry"),
    "run": ("amp_conformance.tools.run",
            "a supervised suite run: a crash, os._exit, a hang or zero executed checks is "
            "never a pass"),
    "selftest": ("amp_conformance.tools.selftest.runner",
                 "mutation testing: prove the suite catches deliberately broken autocast"),
}


#: what ``--help`` says to a user (the module docstring speaks to contributors)
DESCRIPTION = ("Tools around the autocast conformance suite.\nThe suite itself runs under "
               "pytest: `pytest --pyargs amp_conformance --device DEV`.")
EPILOG = """examples:
  python -m amp_conformance run -- --device cpu        the suite, supervised (crashes, hangs)
  python -m amp_conformance discover --device DEV --out DEV.toml
  python -m amp_conformance review DEV.toml            what discover left to review
  python -m amp_conformance coverage --device cuda --fake
`python -m amp_conformance COMMAND --help` says more of each."""


def unrecognized(args: argparse.Namespace, argv: list[str], extra: list[str]) -> str:
    """What to say of arguments no command takes: for one that hands the rest to pytest
    (``run``), the command line with ``--`` where pytest's arguments begin."""
    said = f"unrecognized arguments: {' '.join(extra)}"
    if not hasattr(args, "pytest_args") or "--" in argv:
        return said
    at = argv.index(extra[0])
    fixed = shlex.join(["python", "-m", "amp_conformance", *argv[:at], "--", *argv[at:]])
    return f"{said}\n  pytest's arguments go after --: {fixed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_conformance", description=DESCRIPTION,
                                     epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(unrecognized(args, argv, extra))
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
