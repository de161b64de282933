"""``python -m amp_conformance selftest``: mutation testing of the suite itself.

Each mutant of :data:`amp_conformance.tools.selftest.catalogue.CATALOGUE` (a deliberately broken autocast)
is applied in its own run of the suite, a subprocess::

    AMP_CONFORMANCE_MUTANT=<name> python -m pytest -p amp_conformance.tools.selftest.plugin \\
        --pyargs amp_conformance.suite -k <select> --device <device> [--fake]

so mutants never leak into each other. A mutant is **killed** when that run fails and a
failure message (the ``E`` lines of the report, not just a test id) contains the
mutant's ``expect`` text: the suite caught it and said what is broken. Anything else is a
survivor: the run passed (``survived``), failed without naming it (``unnamed``), or
errored or timed out (``error``).

Before any mutant, the union of the selections runs unmutated (one run per device tier);
if that baseline is not green the campaign stops with exit status 2, since a kill on a
red baseline proves nothing.

The last line printed is ``killed K/N``, then the survivors by name. A mutant may carry
a ``gap`` note: a hole in the suite that is known and explained; it is run and reported
like any other, but its survival does not fail the campaign unless ``--strict``. Exit
status 0 when every mutant without a gap was killed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from amp_conformance.tools.selftest.catalogue import CATALOGUE, Mutant

#: pytest options of every run: quiet, short tracebacks (the ``E`` lines carry the
#: messages), no colours, no cache; deselected items are not worth a line.
PYTEST_OPTIONS = ("-q", "--tb=short", "--color=no", "-p", "no:cacheprovider", "-rfE")

_SUMMARY = re.compile(r"=+ (.*?) in [\d.]+s(?: \(.*\))? =+\s*$")
_OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def _cpus() -> int:
    """The CPUs this process may run on (the affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None,
                        help="device tier to run: the mutants of this device type (default: "
                             "cpu, or every fake-tier device with --fake)")
    parser.add_argument("--fake", action="store_true",
                        help="run the fake tier: mutants of a device's policy checked "
                             "through FakeTensorMode (e.g. cuda without CUDA)")
    parser.add_argument("--all", action="store_true",
                        help="every tier this machine can run: the cpu mutants and the fake tier")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=[],
                        help="run only these mutants (any tier); repeatable")
    parser.add_argument("--jobs", "-j", type=int, default=_cpus(),
                        help="mutant runs in parallel processes (default: number of CPUs, "
                             "%(default)s here)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds one run may take before it counts as an error "
                             "(default %(default)s)")
    parser.add_argument("--list", action="store_true",
                        help="list the selected mutants (name, tier, what it breaks) and exit")
    parser.add_argument("--show-output", action="store_true",
                        help="print the pytest output of every mutant that was not killed")
    parser.add_argument("--strict", action="store_true",
                        help="known gaps (mutants the suite is known not to catch yet) that "
                             "survive fail the campaign too")


# -- selection -----------------------------------------------------------------------


class SelectionError(ValueError):
    """A selection of mutants that names none of the catalogue's (a usage error, exit 2)."""


def select_mutants(device: str | None, fake: bool, only: Sequence[str] = (),
                   every_tier: bool = False) -> list[Mutant]:
    """The campaign's mutants: ``only`` by name (any tier), else the cpu and fake tiers
    (``every_tier``), else one tier of the catalogue. Raises SelectionError for a name
    ``only`` gives that the catalogue lacks."""
    if only:
        unknown = list(dict.fromkeys(n for n in only if n not in CATALOGUE))
        if unknown:
            raise SelectionError(
                f"--only {' '.join(unknown)}: no such mutant{'s' if len(unknown) > 1 else ''} "
                "in the catalogue; list them with python -m amp_conformance selftest --list --all")
        return [CATALOGUE[n] for n in dict.fromkeys(only)]
    if every_tier:
        return [m for m in CATALOGUE.values() if m.fake or m.device == "cpu"]
    if fake:
        return [m for m in CATALOGUE.values() if m.fake and device in (None, m.device)]
    return [m for m in CATALOGUE.values() if not m.fake and m.device == (device or "cpu")]


def tiers(mutants: Iterable[Mutant]) -> dict[tuple[str, ...], list[Mutant]]:
    """Mutants grouped by the suite options their runs share (one baseline per group)."""
    groups: dict[tuple[str, ...], list[Mutant]] = {}
    for m in mutants:
        groups.setdefault(tuple(m.suite_options()), []).append(m)
    return groups


def union_selection(mutants: Iterable[Mutant]) -> str:
    return " or ".join(f"({m.select})" for m in mutants)


# -- running -------------------------------------------------------------------------


@dataclass
class Run:
    """One subprocess run of the suite and what came of it."""

    label: str
    returncode: int | None  # None: timed out
    output: str
    seconds: float

    @property
    def outcomes(self) -> dict[str, int]:
        for line in reversed(self.output.splitlines()):
            if _SUMMARY.match(line) or (" in " in line and _OUTCOME.search(line)):
                found = {kind.rstrip("s") if kind.startswith("error") else kind: int(n)
                         for n, kind in _OUTCOME.findall(line)}
                if found:
                    return found
        return {}

    def summary(self) -> str:
        counts = self.outcomes
        text = ", ".join(f"{n} {k}" for k, n in counts.items() if k != "deselected")
        return text or "no summary"

    def messages(self) -> str:
        """The failure messages: the ``E`` lines of the report."""
        return "\n".join(line[1:].strip() for line in self.output.splitlines()
                         if line.startswith("E ") or line == "E")


def bytecode_cache() -> str:
    """Where the runs keep bytecode when PYTHONDONTWRITEBYTECODE forbids it beside the
    sources: a per-user directory under the temporary directory, kept between campaigns
    (Python checks every cached file against its source)."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"amp-conformance-pycache-{user}")


def pytest_command(select: str, suite_options: Sequence[str], mutant: str | None = None) -> list[str]:
    """The run's command line (the mutant, if any, is named by AMP_CONFORMANCE_MUTANT)."""
    plugin = ["-p", "amp_conformance.tools.selftest.plugin"] if mutant is not None else []
    return [sys.executable, "-m", "pytest", *plugin, "--pyargs", "amp_conformance.suite",
            "-k", select, *suite_options, *PYTEST_OPTIONS]


def reproduction(m: Mutant) -> str:
    """A shell command running the suite against one mutant, as the campaign does."""
    command = pytest_command(m.select, m.suite_options(), m.name)
    command[0] = "python"
    return f"AMP_CONFORMANCE_MUTANT={shlex.quote(m.name)} {shlex.join(command)}"


def run_suite(label: str, select: str, suite_options: Sequence[str], mutant: str | None,
              timeout: float, cwd: str) -> Run:
    env = dict(os.environ)
    env.pop("AMP_CONFORMANCE_MUTANT", None)
    env.pop("PYTEST_ADDOPTS", None)
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        # No bytecode may be written beside the sources: keep it in a cache directory of
        # its own instead, so the runs share what the first one compiled and
        # assertion-rewrote (torch, hypothesis, the suite) - a fifth of every run.
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = bytecode_cache()
    command = pytest_command(select, suite_options, mutant)
    if mutant is not None:
        env["AMP_CONFORMANCE_MUTANT"] = mutant
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        return Run(label, None, (out or "") + f"\n[timed out after {timeout:.0f}s]",
                   time.perf_counter() - start)
    return Run(label, done.returncode, done.stdout + done.stderr, time.perf_counter() - start)


@dataclass
class Verdict:
    mutant: Mutant
    run: Run
    status: str  # killed, survived, unnamed, error
    detail: str

    @property
    def killed(self) -> bool:
        return self.status == "killed"


def judge(mutant: Mutant, run: Run) -> Verdict:
    counts = run.outcomes
    if run.returncode is None:
        return Verdict(mutant, run, "error", f"timed out after {run.seconds:.0f}s")
    if run.returncode == 0:
        return Verdict(mutant, run, "survived", f"the suite passed ({run.summary()})")
    if run.returncode == 5:  # pytest.ExitCode.NO_TESTS_COLLECTED
        return Verdict(mutant, run, "error", f"-k {mutant.select!r} selects no check of the "
                       f"{mutant.tier} suite (is the suite module it targets there?)")
    if run.returncode != 1 or not counts.get("failed"):
        last = [line for line in run.output.splitlines() if line.strip()][-1:] or [""]
        return Verdict(mutant, run, "error",
                       f"pytest exit status {run.returncode} ({run.summary()}), not a test "
                       f"failure: {last[0].strip()[:200]}")
    messages = run.messages()
    missing = [text for text in mutant.expected_texts if text not in messages]
    if missing:
        return Verdict(mutant, run, "unnamed",
                       f"{counts['failed']} failed, but no failure message says "
                       f"{' / '.join(repr(t) for t in missing)}")
    failed = [line.split(" - ")[0].removeprefix("FAILED ").split("::")[-1]
              for line in run.output.splitlines() if line.startswith("FAILED ")]
    shown = ", ".join(failed[:2]) + (f" (+{len(failed) - 2})" if len(failed) > 2 else "")
    return Verdict(mutant, run, "killed", f"by {shown}")


def _run_baselines(groups: dict[tuple[str, ...], list[Mutant]], args: argparse.Namespace,
                   cwd: str) -> list[Run]:
    def one(item):
        options, members = item
        return run_suite(f"baseline {' '.join(options)}", union_selection(members), options,
                         None, args.timeout, cwd)

    with ThreadPoolExecutor(max_workers=max(1, min(args.jobs, len(groups)))) as pool:
        return list(pool.map(one, groups.items()))


def _selected(args: argparse.Namespace) -> list[Mutant]:
    """The mutants the options select; SelectionError when they select none."""
    mutants = select_mutants(args.device, args.fake, args.only, args.all)
    if not mutants:
        tier = f"{args.device or 'any device'}{' (fake)' if args.fake else ''}"
        raise SelectionError(f"no mutant in the catalogue for {tier}; list them with "
                             "python -m amp_conformance selftest --list --all")
    return mutants


def run(args: argparse.Namespace) -> int:
    try:
        mutants = _selected(args)
    except SelectionError as exc:  # a usage error, not a survivor: exit 2, not 1
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        width = max(len(m.name) for m in mutants)
        for m in mutants:
            print(f"{m.name:<{width}}  {m.tier:<11}  {m.description}")
        return 0
    jobs = max(1, args.jobs)
    groups = tiers(mutants)
    started = time.perf_counter()
    print(f"selftest: {len(mutants)} mutants, tiers {', '.join(sorted({m.tier for m in mutants}))}"
          f", {jobs} jobs, torch {_torch_version()}", flush=True)
    cpu_before = _children_cpu()
    with tempfile.TemporaryDirectory(prefix="amp-selftest-") as cwd:
        for base in _run_baselines(groups, args, cwd):
            counts = base.outcomes
            if base.returncode != 0 or not counts.get("passed"):
                print(base.output)
                print(f"selftest: BASELINE NOT GREEN: {base.label} (exit status "
                      f"{base.returncode}, {base.summary()}): the unmutated suite must pass "
                      "the union of the mutants' selections before any kill means anything")
                return 2
            print(f"baseline  {base.label}: {base.summary()} ({base.seconds:.1f}s)", flush=True)

        def one(m: Mutant) -> Verdict:
            return judge(m, run_suite(m.name, m.select, m.suite_options(), m.name,
                                      args.timeout, cwd))

        verdicts: list[Verdict] = []
        width = max(len(m.name) for m in mutants)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for v in pool.map(one, mutants):
                verdicts.append(v)
                print(f"{v.status.upper():<8}  {v.mutant.name:<{width}}  {v.run.seconds:5.1f}s  "
                      f"{v.detail}", flush=True)
    survivors = [v for v in verdicts if not v.killed]
    failing = [v for v in survivors if args.strict or v.mutant.gap is None]
    if args.show_output:
        for v in survivors:
            print(f"\n----- {v.mutant.name}: {reproduction(v.mutant)}")
            print(v.run.output)
    elapsed = time.perf_counter() - started
    cpu = _children_cpu() - cpu_before
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"time: {elapsed:.1f}s wall, {cpu:.1f}s CPU in the runs, for {len(verdicts)} mutants "
          f"+ {len(groups)} baseline run(s), {jobs} jobs{load}")
    print(f"killed {len(verdicts) - len(survivors)}/{len(verdicts)}")
    for v in survivors:
        gap = f" [known gap: {v.mutant.gap}]" if v.mutant.gap else ""
        print(f"  {v.status}: {v.mutant.name} ({v.mutant.tier}): {v.detail}{gap}")
    for v in verdicts:
        if v.killed and v.mutant.gap:
            print(f"  gap closed: {v.mutant.name} is killed now; drop its gap note")
    return 0 if not failing else 1


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    try:
        import resource
    except ImportError:  # not on Windows
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _torch_version() -> str:
    import torch

    return torch.__version__
