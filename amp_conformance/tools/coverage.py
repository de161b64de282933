"""``python -m amp_conformance coverage --device DEV``: which overloads of a device's
autocast policy the op lists exercise, as a table (the coverage family's check,
:mod:`amp_conformance.checks.coverage.check`, says how an overload counts as covered).
Exit status 1 when an overload is missing or reached but not checked, 2 on bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from amp_conformance.checks.coverage.check import compute, format_report
from amp_conformance.core import devices
from amp_conformance.core.resolve import SettingsError, resolve
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpList

# -- command line --------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", metavar="TYPE",
                        help="device type whose autocast policy is checked (default: cpu)")
    parser.add_argument("--oplist", action="append", default=[], metavar="PATH",
                        help="extra op-list file (TOML) for the device; repeatable")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--fake", dest="fake", action="store_const", const=True, default=None,
                      help="observe through FakeTensorMode even if the device is here")
    mode.add_argument("--real", dest="fake", action="store_const", const=False,
                      help="observe on the real device (default where it is available)")
    parser.add_argument("--backend-module", action="append", default=[], metavar="MODULE",
                        help="module imported first to register a backend; repeatable")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="do not list the covered overloads and observation notes")


def _device(name: str) -> None:
    """Validate ``--device``; an unknown type may be a PrivateUse1 backend not imported."""
    try:
        devices.validate(name)
    except devices.DeviceError as exc:
        text = str(exc)  # devices.validate already says to pass --backend-module
        prefix = "" if text.startswith("--device") else f"--device {name}: "
        raise devices.DeviceError(prefix + text) from None


def _lists(device: str, extra: Sequence[str]) -> OpList:
    """The device's lists; an ``--oplist`` for another device is refused, not ignored, and
    a device no list describes is bad input naming ``--oplist`` (every overload of its
    policy would be reported missing, with no word of what to pass)."""
    lists = oplist.load_only(device, extra)
    if not lists.paths:
        raise SettingsError(
            f"no op list describes device {device!r}, so nothing covers its policy: pass "
            f"--oplist PATH with a list whose [list] device = \"{device}\" (a first one: "
            f"python -m amp_conformance discover --device {device} --backend-module MODULE "
            f"--out {device}.toml; built-in lists exist for "
            f"{', '.join(oplist.builtin_devices())})")
    return lists


def run(args: argparse.Namespace) -> int:
    """Print the coverage report; exit status 1 when an overload is missing or reached but
    not checked, 2 on bad input."""
    try:
        # fake=None: coverage needs no values, so it takes the fake tier where the device is absent
        target = resolve(args.device, args.fake or None, (), args.backend_module).target
        lists = _lists(args.device, args.oplist)
    except (SettingsError, oplist.OpListError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = compute(args.device, lists, target)
    print(format_report(report, verbose=not args.quiet))
    return 1 if report.failed else 0
