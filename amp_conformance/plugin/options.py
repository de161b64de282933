"""Command-line options and the settings resolved from them.

Canonical options carry an ``--amp-`` prefix so the plugin can be installed beside any
project. The short spellings (``--device``, ``--numerics``, ``--fake``) are aliases added
only when the host project (its root conftest.py or another plugin) has not defined an
option of that name: the host keeps its own option, ours stays reachable as ``--amp-*``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from amp_conformance.checks import registry
from amp_conformance.core import generated
from amp_conformance.core.resolve import SettingsError
from amp_conformance.core.resolve import resolve as resolve_run
from amp_conformance.core.target import Target

#: Short aliases and the canonical option each stands for.
ALIASES = {"--device": "--amp-device", "--numerics": "--amp-numerics", "--fake": "--amp-fake",
           "--compile": "--amp-compile"}
NUMERICS = ("bitwise", "close")

_OPTIONS = {
    "--amp-device": dict(
        dest="amp_device", default="cpu", metavar="TYPE",
        help="device type whose autocast is checked (default: cpu)",
    ),
    "--amp-dtype": dict(
        dest="amp_dtype", action="append", default=None, metavar="DTYPE",
        help="autocast dtype to check (bfloat16/float16); repeatable; default: every "
             "lower-precision dtype the device supports",
    ),
    "--amp-numerics": dict(
        dest="amp_numerics", default=None, choices=NUMERICS,
        help="compare autocast outputs with the hand-cast control bitwise (default) or "
             "within per-dtype tolerances (close; the default where the device declares "
             "no bitwise reproducibility)",
    ),
    "--amp-fake": dict(
        dest="amp_fake", action="store_true", default=False,
        help="check the device's policy without the hardware, through FakeTensorMode",
    ),
    "--oplist": dict(
        dest="amp_oplists", action="append", default=[], metavar="PATH",
        help="extra op-list file (TOML) for the device; repeatable",
    ),
    "--amp-quarantine-file": dict(
        dest="amp_quarantine_file", default=None, metavar="PATH",
        help="the run's quarantine file: the ops that lost the device, one per line (python "
             "-m amp_conformance run passes one to every process): an item calling one is "
             "not run",
    ),
    "--amp-no-quarantine": dict(
        dest="amp_no_quarantine", action="store_true", default=False,
        help="keep no quarantine: every item is tried, also one that calls an op that lost "
             "the device (python -m amp_conformance run --no-quarantine passes it); under "
             "xdist a worker that loses its device then stops the run instead of being "
             "replaced",
    ),
    "--backend-module": dict(
        dest="amp_backend_modules", action="append", default=[], metavar="MODULE",
        help="module imported before collection to register a backend (e.g. torch_npu); "
             "repeatable",
    ),
    "--capabilities": dict(
        dest="amp_capabilities", action="append", default=[], metavar="PATH",
        help="TOML file declaring what the device can do (cast_cache, bitwise, amp_dtypes); "
             "checks of an absent capability are skipped with that reason; repeatable",
    ),
    "--xfail-file": dict(
        dest="amp_xfail_files", action="append", default=[], metavar="PATH",
        help="expected failures: one test id or node-id prefix per line, '# reason' after "
             "it; strict (an expected failure that passes fails the run); repeatable",
    ),
    "--conformance-report": dict(
        dest="amp_report", default=None, metavar="PATH.json",
        help="write the conformance report: JSON (docs/report-schema.md), plus PATH.html "
             "and PATH.md beside it",
    ),
    "--amp-allow-empty": dict(
        dest="amp_allow_empty", action="store_true", default=False,
        help="exit 0 even when every selected conformance item was skipped (by default such "
             "a run ends with exit status 5: it proves nothing)",
    ),
    "--amp-no-excuses": dict(
        dest="amp_no_excuses", action="store_true", default=False,
        help="excuse no failure: an item the suite would skip as the backend's limit, a "
             "kernel a check needs as a tool or a transform's own departure (each proved "
             "independent of autocast) fails instead, naming the excuse and its proof",
    ),
    "--amp-resume": dict(
        dest="amp_resume", default=None, metavar="PATH",
        help="deselect the items whose pytest node ids PATH lists, one a line: those an "
             "earlier process of the run already ran (python -m amp_conformance run writes it "
             "when it restarts after a lost device or a crash)",
    ),
    "--amp-hypothesis-profile": dict(dest="amp_hypothesis_profile", default="ci", choices=(
        "ci", "dev", "nightly"), help="Hypothesis profile of the property checks (default: ci)"),
}


def value_options() -> frozenset[str]:
    """The suite's options (aliases too) that take a value: ``--device cuda``'s ``cuda`` is
    no test path (``python -m amp_conformance run`` reads its pytest arguments)."""
    flags = ("store_true", "store_false")
    names = {n for n, kw in all_options().items() if kw.get("action") not in flags}
    return frozenset(names | {alias for alias, canonical in ALIASES.items() if canonical in names})


#: pytest's, pytest-xdist's and pytest-timeout's options that take their value as the next
#: argument (``-k EXPR``)
PYTEST_VALUE_OPTIONS = frozenset({
    "-k", "-m", "-p", "-c", "-o", "-W", "-r", "-n", "--tb", "--rootdir", "--basetemp",
    "--confcutdir", "--junitxml", "--junit-xml", "--maxfail", "--durations", "--deselect",
    "--ignore", "--ignore-glob", "--log-level", "--log-file", "--timeout", "--dist",
    "--numprocesses", "--max-worker-restart", "--maxprocesses", "--import-mode",
    "--hypothesis-profile", "--hypothesis-seed", "--override-ini", "--capture",
})


def positional_paths(pytest_args: list[str]) -> list[str]:
    """The arguments pytest takes as test paths: those that are no option nor an option's
    value (``--backend-module mybackend`` names a module, though ``./mybackend`` exists)."""
    takes_value = PYTEST_VALUE_OPTIONS | value_options()
    paths, value_next = [], False
    for arg in pytest_args:
        if value_next:
            value_next = False
        elif arg.startswith("-"):
            value_next = "=" not in arg and arg in takes_value
        else:
            paths.append(arg)
    return paths


def all_options() -> dict[str, Mapping[str, Any]]:
    """The suite's options, then each opt-in tier's (:mod:`amp_conformance.checks.tier`)."""
    found: dict[str, Mapping[str, Any]] = dict(_OPTIONS)
    for tier in registry.tiers():
        found.update(tier.options)
    return found


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("amp-conformance", "autocast conformance suite")
    for name, kwargs in all_options().items():
        group.addoption(name, **kwargs)


def _defined_option_names(parser: pytest.Parser) -> set[str]:
    names: set[str] = set()
    for group in [parser._anonymous, *parser._groups]:  # pytest keeps no public listing
        for option in group.options:
            names.update(option.names())
    return names


def add_aliases(parser: pytest.Parser) -> list[str]:
    """Add each short alias that nobody else defined; return those added."""
    taken = _defined_option_names(parser)
    group = parser.getgroup("amp-conformance")
    added = []
    for alias, canonical in ALIASES.items():
        if alias in taken:
            continue
        group.addoption(alias, **{**all_options()[canonical], "help": f"alias of {canonical}"})
        added.append(alias)
    return added


@dataclass(frozen=True)
class Settings:
    """What the run checks, resolved and validated once per process."""

    device: str
    amp_dtypes: tuple[torch.dtype, ...]
    numerics: str
    fake: bool
    oplists: tuple[str, ...] = ()
    #: --amp-compile: the torch.compile backend of the per-entry compiled tier (None: off)
    compile_backend: str | None = None
    #: --amp-opinfo: the OpInfo tier is on
    opinfo: bool = False
    #: --amp-opinfo-samples: "forms" (every argument form), "all", or the first N samples
    opinfo_samples: int | str = "forms"
    #: how the policy properties call each op (``call_forms.FORMS`` merged with the
    #: ``pytest_amp_conformance_property_forms`` hooks); None: ``call_forms.FORMS`` alone
    forms: Mapping[str, Callable[..., tuple]] | None = field(default=None, compare=False,
                                                             repr=False)
    #: the wrapper declarations of ``--wrapper`` and ``pytest_amp_conformance_wrappers``,
    #: validated (the wrapper tier, suite/test_wrappers.py; empty: not collected)
    wrappers: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    #: what the vendor declared: capabilities, expected failures (plugin.vendor.Declarations)
    declarations: Any = field(default=None, compare=False, repr=False)
    #: what an opt-in tier resolved beyond the fields above (a new tier's settings)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def target(self) -> Target:
        return Target(self.device, self.fake)


def resolve(config: pytest.Config) -> Settings:
    """Validate the options (core.resolve, shared with discover and coverage); raise
    pytest.UsageError with what is allowed."""
    try:
        resolved = resolve_run(config.getoption("amp_device"), bool(config.getoption("amp_fake")),
                               config.getoption("amp_dtype") or (),
                               config.getoption("amp_backend_modules") or ())
    except SettingsError as exc:
        raise pytest.UsageError(f"amp-conformance: {exc}") from None
    device, fake, dtypes = resolved.device, resolved.fake, resolved.amp_dtypes
    return Settings(
        device=device,
        amp_dtypes=dtypes,
        numerics=config.getoption("amp_numerics") or "bitwise",
        fake=fake,
        oplists=tuple(config.getoption("amp_oplists")),
    )


#: docs/options.md's markers around the generated option table
BEGIN = "<!-- options: generated from amp_conformance/plugin/options.py -->"
END = "<!-- end of generated options -->"


def options_markdown() -> str:
    """The option table of docs/options.md: each option of the suite and of its opt-in
    tiers, its alias, value, default and help text."""
    aliases = {canonical: alias for alias, canonical in ALIASES.items()}
    rows = ["| option | value | default | what it does |", "| --- | --- | --- | --- |"]
    for name, kwargs in all_options().items():
        shown = f"`{name}`" + (f" (alias `{aliases[name]}`)" if name in aliases else "")
        if kwargs.get("action") == "store_true":
            value = "—"
        elif kwargs.get("choices"):
            value = " \\| ".join(f"`{choice}`" for choice in kwargs["choices"])
        else:
            value = f"`{kwargs['metavar']}`".replace("|", "\\|")
        default = kwargs.get("default")
        default_text = f"`{default}`" if isinstance(default, str) else "—"
        text = str(kwargs["help"]).replace("|", "\\|")
        rows.append(f"| {shown} | {value} | {default_text} | {text} |")
    return "\n".join(rows) + "\n"


def write(path: Path) -> bool:
    """Replace the generated option table of ``path`` (docs/options.md); whether it changed."""
    return generated.write(path, BEGIN, END, options_markdown())
