"""``python -m amp_conformance selftest``: mutation testing of the suite itself.

Each mutant of the check families (``checks/<family>/mutants.py``, gathered by
:func:`amp_conformance.checks.registry.mutants`; each a deliberately broken autocast) is
applied in its own run of the suite, a process of its own::

    AMP_CONFORMANCE_MUTANT=<name> python -m pytest -p amp_conformance.plugin.mutant \\
        --pyargs amp_conformance.suite -k <select> --device <device> [--fake]

so mutants never leak into each other. The process is forked from the campaign's, which
imported torch, pytest and the suite once (a run pays its collection and items, not an
interpreter's start and torch's import: about half its time), where the platform allows
it; ``AMP_CONFORMANCE_FORK=0`` runs each as that command instead.

A mutant is **killed** when that run fails and one
failing test's own message (the ``E`` lines of its section of the report, not a test id,
nor the messages of several tests pieced together) contains every one of the mutant's
``expect`` texts: the suite caught it and that test said what is broken. Anything else is
a survivor: the run passed (``survived``), failed without naming it (``unnamed``), or
errored or timed out (``error``).

``--numerics close`` runs the campaign of
:data:`amp_conformance.checks.numerics.mutants.CLOSE_MODE` (or the ``--only``
mutants) with the suite's ``--numerics close``: the mutants that close mode must still
catch (wrong dtype, wrong op, values 1% off), and those declared to survive there (the
one-ulp ones, within assert_close's tolerances by design), which fail the campaign if
they are killed instead.

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
import contextlib
import os
import re
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from amp_conformance.checks.mutation import Mutant
from amp_conformance.checks.registry import mutants
from amp_conformance.tools import forked

CATALOGUE = mutants()

#: pytest options of every run: quiet, short tracebacks (the ``E`` lines carry the
#: messages), no colours, no cache; deselected items are not worth a line.
PYTEST_OPTIONS = ("-q", "--tb=short", "--color=no", "-p", "no:cacheprovider", "-rfE")

_SUMMARY = re.compile(r"=+ (.*?) in [\d.]+s(?: \(.*\))? =+\s*$")
_FAILURES = re.compile(r"^=+ FAILURES =+$")
_SECTION = re.compile(r"^=+ .+ =+$")
_TEST_HEADER = re.compile(r"^_+ (.+?) _+$")  # one underscore a side for a long test id
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
    parser.add_argument("--numerics", choices=("bitwise", "close"), default="bitwise",
                        help="close: run the close-mode campaign (the mutants close mode must "
                             "catch, and the one-ulp ones it is declared to let through) with "
                             "the suite's --numerics close; with --only, those mutants")


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


def in_close_mode(m: Mutant) -> Mutant:
    """``m`` run with the suite's ``--numerics close`` (same name: the plugin finds it)."""
    if "--numerics" in m.options:
        return m
    return replace(m, options=(*m.options, "--numerics", "close"))


def close_campaign(only: Sequence[str] = ()) -> tuple[list[Mutant], dict[str, str]]:
    """``--numerics close``: the mutants CLOSE_MODE names (or those ``only`` names), each in
    close mode, and why each one declared to survive there does."""
    from amp_conformance.checks.numerics.mutants import CLOSE_MODE

    names = list(dict.fromkeys(only)) if only else list(CLOSE_MODE)
    unknown = [n for n in names if n not in CATALOGUE]
    if unknown:
        raise SelectionError(f"--numerics close: no mutant {' '.join(unknown)} in the catalogue "
                             "(does the numerics family declare them?)")
    declared = {n: why for n in names if (why := CLOSE_MODE.get(n)) is not None}
    return [in_close_mode(CATALOGUE[n]) for n in names], declared


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

    def failures(self) -> dict[str, str]:
        """Each failing test's own message, by test name: the ``E`` lines of its section
        (``____ name ____``) of the FAILURES part of pytest's ``--tb=short`` report."""
        found: dict[str, list[str]] = {}
        current, inside = None, False
        for line in self.output.splitlines():
            if _FAILURES.match(line) or (inside and _SECTION.match(line)):
                inside, current = bool(_FAILURES.match(line)), None
            elif inside and (header := _TEST_HEADER.match(line)):
                current = header.group(1)
                found.setdefault(current, [])
            elif current is not None and (line.startswith("E ") or line == "E"):
                found[current].append(line[1:].strip())
        return {name: "\n".join(lines) for name, lines in found.items()}


def bytecode_cache() -> str:
    """Where the runs keep bytecode when PYTHONDONTWRITEBYTECODE forbids it beside the
    sources: a per-user directory under the temporary directory, kept between campaigns
    (Python checks every cached file against its source)."""
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"amp-conformance-pycache-{user}")


def suite_command(select: str, suite_options: Sequence[str], mutant: str | None = None) -> list[str]:
    """The run's command line (the mutant, if any, is named by AMP_CONFORMANCE_MUTANT)."""
    plugin = ["-p", "amp_conformance.plugin.mutant"] if mutant is not None else []
    return [sys.executable, "-m", "pytest", *plugin, "--pyargs", "amp_conformance.suite",
            "-k", select, *suite_options, *PYTEST_OPTIONS]


def reproduction(m: Mutant) -> str:
    """A shell command running the suite against one mutant, as the campaign does."""
    command = suite_command(m.select, m.suite_options(), m.name)
    command[0] = "python"
    return f"AMP_CONFORMANCE_MUTANT={shlex.quote(m.name)} {shlex.join(command)}"


def _env(mutant: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AMP_CONFORMANCE_MUTANT", None)
    env.pop("PYTEST_ADDOPTS", None)
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        # No bytecode may be written beside the sources: keep it in a cache directory of
        # its own instead, so the runs share what the first one compiled and
        # assertion-rewrote (torch, hypothesis, the suite) - a fifth of every run.
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = bytecode_cache()
    if mutant is not None:
        env["AMP_CONFORMANCE_MUTANT"] = mutant
    return env


class Pending:
    """One run of the suite under way: a child forked from this process, which imported
    torch, pytest and the suite once (:mod:`amp_conformance.tools.forked`'s way: a run
    then pays its collection and its items, not an interpreter's start and torch's import),
    or a subprocess where forking is not possible; its output goes to a file of its own."""

    def __init__(self, label: str, select: str, suite_options: Sequence[str],
                 mutant: str | None, timeout: float, cwd: str):
        self.label, self.timeout, self.start = label, timeout, time.perf_counter()
        command = suite_command(select, suite_options, mutant)
        out = tempfile.NamedTemporaryFile(prefix="run-", suffix=".txt", dir=cwd, delete=False)
        self.path = out.name
        self.child = forked.launch(command, out, _env(mutant), cwd)
        out.close()

    def poll(self) -> Run | None:
        """The finished run, or None while it runs (a run past its time is killed)."""
        code = self.child.poll()
        elapsed = time.perf_counter() - self.start
        if code is None and elapsed <= self.timeout:
            return None
        if code is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()
        with open(self.path, encoding="utf-8", errors="replace") as done:
            output = done.read()
        os.unlink(self.path)
        if code is None:
            output += f"\n[timed out after {self.timeout:.0f}s]"
        return Run(self.label, code, output, elapsed)


def run_all(tasks: Sequence[tuple], jobs: int, timeout: float, cwd: str,
            done: Callable[[int, Run], None] = lambda *_: None) -> list[Run]:
    """Run the suite once per task ``(label, select, suite_options, mutant)``, ``jobs`` at a
    time, from this thread (forking from a thread of a pool is not safe); ``done`` is told of
    each run in the tasks' order as soon as it and those before it ended."""
    runs: list[Run | None] = [None] * len(tasks)
    running: dict[int, Pending] = {}
    queue, told = list(range(len(tasks))), 0
    while queue or running:
        while queue and len(running) < max(1, jobs):
            i = queue.pop(0)
            running[i] = start(*tasks[i], timeout, cwd)
        for i, pending in list(running.items()):
            finished = pending.poll()
            if finished is not None:
                runs[i] = finished
                del running[i]
        while told < len(tasks) and runs[told] is not None:
            done(told, runs[told])
            told += 1
        if running:
            time.sleep(0.05)
    return [r for r in runs if r is not None]


def start(label: str, select: str, suite_options: Sequence[str], mutant: str | None,
          timeout: float, cwd: str) -> Pending:
    """One run of the suite, started (the campaign's one seam to its processes)."""
    return Pending(label, select, suite_options, mutant, timeout, cwd)


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
    texts = mutant.expected_texts
    failures = run.failures()
    naming = [name for name, message in failures.items() if all(t in message for t in texts)]
    if not naming:
        nowhere = [t for t in texts if not any(t in m for m in failures.values())]
        why = (f"none says {' / '.join(map(repr, nowhere))}" if nowhere
               else "each says only part of it")
        return Verdict(mutant, run, "unnamed",
                       f"{counts['failed']} failed, but no failing test's own message says "
                       f"{' and '.join(repr(t) for t in texts)} ({why})")
    shown = ", ".join(naming[:2]) + (f" (+{len(naming) - 2})" if len(naming) > 2 else "")
    return Verdict(mutant, run, "killed", f"by {shown}")


def _run_baselines(groups: dict[tuple[str, ...], list[Mutant]], args: argparse.Namespace,
                   cwd: str) -> list[Run]:
    tasks = [(f"baseline {' '.join(options)}", union_selection(members), options, None)
             for options, members in groups.items()]
    return run_all(tasks, min(args.jobs, len(groups)), args.timeout, cwd)


def _selected(args: argparse.Namespace) -> list[Mutant]:
    """The mutants the options select; SelectionError when they select none."""
    mutants = select_mutants(args.device, args.fake, args.only, args.all)
    if not mutants:
        tier = f"{args.device or 'any device'}{' (fake)' if args.fake else ''}"
        raise SelectionError(f"no mutant in the catalogue for {tier}; list them with "
                             "python -m amp_conformance selftest --list --all")
    return mutants


def _campaign(args: argparse.Namespace) -> tuple[list[Mutant], dict[str, str]]:
    """The mutants to run, and why each one declared to survive (close mode) does."""
    if args.numerics == "close":
        return close_campaign(args.only)
    return _selected(args), {}


def _baselines_green(groups: dict[tuple[str, ...], list[Mutant]], args: argparse.Namespace,
                     cwd: str) -> bool:
    """Run the unmutated union of each tier's selections; print it and say so if not green."""
    for base in _run_baselines(groups, args, cwd):
        if base.returncode != 0 or not base.outcomes.get("passed"):
            print(base.output)
            print(f"selftest: BASELINE NOT GREEN: {base.label} (exit status "
                  f"{base.returncode}, {base.summary()}): the unmutated suite must pass "
                  "the union of the mutants' selections before any kill means anything")
            return False
        print(f"baseline  {base.label}: {base.summary()} ({base.seconds:.1f}s)", flush=True)
    return True


def _run_mutants(mutants: list[Mutant], args: argparse.Namespace, cwd: str) -> list[Verdict]:
    verdicts: list[Verdict] = []
    width = max(len(m.name) for m in mutants)

    def done(i: int, run: Run) -> None:
        v = judge(mutants[i], run)
        verdicts.append(v)
        print(f"{v.status.upper():<8}  {v.mutant.name:<{width}}  {v.run.seconds:5.1f}s  "
              f"{v.detail}", flush=True)
    run_all([(m.name, m.select, m.suite_options(), m.name) for m in mutants], args.jobs,
            args.timeout, cwd, done)
    return verdicts


def _summary(verdicts: list[Verdict], declared: dict[str, str], strict: bool) -> int:
    """``killed K/N`` over the mutants that must be killed, then the survivors, then the
    declared survivors (close mode); exit status 1 when one that counts went wrong."""
    must = [v for v in verdicts if v.mutant.name not in declared]
    survivors = [v for v in must if not v.killed]
    failing = [v for v in survivors if strict or v.mutant.gap is None]
    print(f"killed {len(must) - len(survivors)}/{len(must)}")
    for v in survivors:
        gap = f" [known gap: {v.mutant.gap}]" if v.mutant.gap else ""
        print(f"  {v.status}: {v.mutant.name} ({v.mutant.tier}): {v.detail}{gap}")
    for v in must:
        if v.killed and v.mutant.gap:
            print(f"  gap closed: {v.mutant.name} is killed now; drop its gap note")
    for v in verdicts:
        if v.mutant.name not in declared:
            continue
        if v.status == "survived":
            print(f"  survived as declared: {v.mutant.name}: {declared[v.mutant.name]}")
        else:
            failing.append(v)
            print(f"  declared to survive, but {v.status}: {v.mutant.name}: {v.detail}")
    return 0 if not failing else 1


def run(args: argparse.Namespace) -> int:
    try:
        mutants, declared = _campaign(args)
    except SelectionError as exc:  # a usage error, not a survivor: exit 2, not 1
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        width = max(len(m.name) for m in mutants)
        for m in mutants:
            note = "  [survives close mode by design]" if m.name in declared else ""
            print(f"{m.name:<{width}}  {m.tier:<11}  {m.description}{note}")
        return 0
    groups = tiers(mutants)
    started, cpu_before = time.perf_counter(), _children_cpu()
    mode = ", --numerics close" if args.numerics == "close" else ""
    print(f"selftest: {len(mutants)} mutants, tiers {', '.join(sorted({m.tier for m in mutants}))}"
          f"{mode}, {max(1, args.jobs)} jobs, torch {_torch_version()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="amp-selftest-") as cwd:
        if not _baselines_green(groups, args, cwd):
            return 2
        verdicts = _run_mutants(mutants, args, cwd)
    if args.show_output:
        for v in verdicts:
            if not v.killed and not (v.mutant.name in declared and v.status == "survived"):
                print(f"\n----- {v.mutant.name}: {reproduction(v.mutant)}")
                print(v.run.output)
    cpu = _children_cpu() - cpu_before
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"time: {time.perf_counter() - started:.1f}s wall, {cpu:.1f}s CPU in the runs, for "
          f"{len(verdicts)} mutants + {len(groups)} baseline run(s), {max(1, args.jobs)} jobs{load}")
    return _summary(verdicts, declared, args.strict)


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
