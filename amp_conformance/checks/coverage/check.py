"""Which overloads of a device's autocast policy the op lists really exercise.

The policy is what the running torch registers: every operator overload with a kernel
for the device's ``Autocast<Device>`` dispatch key. An op-list entry covers the overloads
its call *reaches* under autocast, which is observed rather than guessed from its name:
``torch.matmul`` on CUDA reaches ``aten::matmul`` (whose autocast kernel stops there) but
on a device without a matmul kernel it reaches ``aten::mm``; ``F.cross_entropy`` reaches
``aten::cross_entropy_loss`` on CPU and ``log_softmax`` + ``nll_loss`` on CUDA.

How it is observed: :class:`amp_conformance.core.dispatch.Observer`
registers a Python kernel for every policy overload on a dispatch key above all
``Autocast*`` keys; it records the overload when the call is about to enter the device's
autocast kernel and passes it on unchanged. Calls made *inside* an autocast kernel run
with autocast excluded, so only kernels the entry's own call enters are counted.

An overload counts as covered only when it is *checked*: an entry whose ``policy`` check
applies in this mode (not skipped by the entry, e.g. under ``--fake``, nor by the check's
registered rule) entered it with a call that did not raise (a banned op raising its own
error is the checked outcome). An overload entered only by skipped entries or by calls
that raised is "reached but not checked": nothing verifies its policy here, so it fails
the report like a missing one.

Overloads that cannot be reached from Python, or need hardware features, are excluded
with a written reason in the op list (``[[exclude]]``); everything else must be covered.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from amp_conformance.checks import fake_casts
from amp_conformance.checks.case import Case
from amp_conformance.checks.registry import not_applicable
from amp_conformance.core import devices
from amp_conformance.core.dispatch import Observer, foreign_registrations, policy_overloads
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target, fake_supported
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import Entry, OpList


@dataclass(frozen=True)
class Reach:
    """What one entry's call entered under autocast, and whether it ran to the end."""

    entry: Entry
    overloads: tuple[str, ...]
    errors: tuple[str, ...] = ()
    #: why the entry was not observed at all (its versions, no autocast dtype of the run)
    skipped: str | None = None
    #: the overloads entered by a call the entry's policy check makes and that ran to the
    #: end (or raised a banned op's error): the only ones the entry covers
    checked: tuple[str, ...] = ()
    #: why the policy check of the entry does not run in this mode (its skip), if it does not
    unchecked: str | None = None

    def why_unchecked(self, overload: str) -> str:
        """Why this entry's entering ``overload`` checks nothing (for the report)."""
        if self.unchecked:
            return f"{self.entry.id} (policy check skipped: {self.unchecked})"
        return f"{self.entry.id} (raised: {'; '.join(self.errors) or 'no call completed'})"


@dataclass
class Report:
    device: str
    key: str
    target: Target
    policy: list[str]
    reaches: list[Reach]
    lists: OpList
    #: the autocast dtypes the entries were observed under (hardware-bound exclusions
    #: hold only where the feature is missing for all of them)
    amp_dtypes: tuple[torch.dtype, ...] = ()
    covered: dict[str, list[str]] = field(default_factory=dict)
    #: overloads entered only where no policy check runs or the call raised: the entries
    #: that reach them, each with why that checks nothing
    unchecked: dict[str, list[str]] = field(default_factory=dict)
    excluded: dict[str, oplist.Exclusion] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    #: exclusions of overloads that the device's policy does not have
    stale_exclusions: list[oplist.Exclusion] = field(default_factory=list)
    #: exclusions of overloads that some entry covers anyway
    needless_exclusions: list[oplist.Exclusion] = field(default_factory=list)
    #: entries that claim a cast policy but enter no autocast kernel of the device
    outside_policy: list[Reach] = field(default_factory=list)
    #: entries listed as builtin promotion (no autocast kernel) that enter one
    unexpected_kernels: list[Reach] = field(default_factory=list)
    #: kernels no op list can check, each with why: ops that cannot be resolved here (no
    #: schema: their library is not loaded) and ops of another library than torch's own
    #: that no entry reaches. Listed, never failing: the lists call torch's ops only
    foreign: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        foreign = f", {len(self.foreign)} foreign (not checkable)" if self.foreign else ""
        return (f"coverage {self.device}: {len(self.covered)}/{len(self.policy)} covered, "
                f"{len(self.unchecked)} reached but not checked, "
                f"{len(self.excluded)} excluded, {len(self.missing)} missing{foreign}"
                f"{self._libraries()}")

    def _libraries(self) -> str:
        """``" (amplib 2/2 covered)"``: each operator library the lists name, alone."""
        libraries = sorted({n.partition("::")[0] for n in self.policy} - {"aten"})
        counts = [(lib, sum(n.startswith(f"{lib}::") for n in self.covered),
                   sum(n.startswith(f"{lib}::") for n in self.policy)) for lib in libraries]
        said = ", ".join(f"{lib} {c}/{t} covered" for lib, c, t in counts)
        return f" ({said})" if said else ""

    @property
    def failed(self) -> bool:
        """An overload is missing, or reached only where nothing checks it."""
        return bool(self.missing or self.unchecked)


def default_target(device: str, fake: bool | None = None) -> Target:
    """The real device where it is here, else its policy through FakeTensorMode."""
    if fake is None:
        fake = not devices.is_available(device)
    if fake and not fake_supported(device):
        raise devices.DeviceError(
            f"{device!r} is not available here and its policy cannot be run through "
            f"FakeTensorMode ({devices.dispatch_key(device)} has no kernels, or it is cpu)"
        )
    return Target(device, fake)


def _case_for(entry: Entry, target: Target, dtypes: Sequence[torch.dtype],
              numerics: str) -> Case | None:
    """The case to observe ``entry`` in: the first autocast dtype of the run under which
    its policy check applies, else the first the entry is listed for (observed, but what
    it reaches is not checked), else None."""
    listed = [Case(target, d, entry, numerics) for d in dtypes
              if entry.amp_dtypes is None or devices.dtype_name(d) in entry.amp_dtypes]
    return next((c for c in listed if not_applicable("policy", c) is None),
                listed[0] if listed else None)


def _raised_as_banned(entry: Entry, exc: Exception) -> bool:
    """A banned op raising its own error inside autocast: what its policy check wants."""
    return entry.policy == "banned" and bool(entry.error) and str(entry.error) in str(exc)


def observe(
    entry: Entry, target: Target, amp_dtype: torch.dtype, observer: Observer,
    numerics: str = "bitwise",
) -> Reach:
    """Run every variant of ``entry`` under autocast and record the overloads it enters.

    A call that raises still counts as having entered what it entered before raising
    (reported as reached), but it checks nothing there unless it is a banned op raising
    its error; the error is kept so the report can show it.
    """
    case = Case(target, amp_dtype, entry, numerics)
    unchecked = not_applicable("policy", case)
    errors: list[str] = []
    reached: list[str] = []
    checked: list[str] = []
    dev = target.device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with unchanged_autocast_state(dev, f"the coverage observation of {entry.qualname}"):
            with target.tensors():
                try:
                    args, kwargs = case.build_inputs()
                except Exception as exc:  # noqa: BLE001 - reported, never hidden
                    return Reach(entry, (), (f"building inputs: {describe_error(exc)}",),
                                 unchecked=unchecked)
                for name, fn in oplist.variants(entry):
                    ran = True
                    with observer.recording() as seen:
                        try:
                            with target.autocast(amp_dtype):
                                fake_casts.call(case, name, fn, args, kwargs)
                        except fake_casts.FailedAfterCast:
                            pass  # --fake: the casts were checked before a fake-tier limit
                        except Exception as exc:  # noqa: BLE001 - reported, never hidden
                            errors.append(f"{name}: {describe_error(exc)}")
                            ran = _raised_as_banned(entry, exc)
                    reached.extend(seen)
                    if ran and unchecked is None:
                        checked.extend(seen)
    return Reach(entry, tuple(dict.fromkeys(reached)), tuple(errors),
                 checked=tuple(dict.fromkeys(checked)), unchecked=unchecked)


def compute(
    device: str,
    lists: OpList,
    target: Target | None = None,
    amp_dtypes: Sequence[torch.dtype] | None = None,
    numerics: str = "bitwise",
) -> Report:
    """Observe every applicable entry and compare what they check with the policy."""
    target = target or default_target(device)
    if amp_dtypes is None:
        supported = devices.supported_amp_dtypes(device, target.fake)
        default = devices.default_amp_dtype(device)
        amp_dtypes = [default, *[d for d in supported if d != default]]
    policy = policy_overloads(device)
    reaches: list[Reach] = []
    with Observer(device, policy) as observer:  # removed again: nothing left registered
        for entry in lists.entries:
            gap = entry.version_gap()
            case = None if gap else _case_for(entry, target, amp_dtypes, numerics)
            if case is None:
                reaches.append(Reach(entry, (), (), gap or "no autocast dtype of this run applies"))
                continue
            reaches.append(observe(entry, target, case.amp_dtype, observer, numerics))
    report = Report(device, devices.dispatch_key(device), target, policy, reaches, lists,
                    tuple(amp_dtypes), foreign=foreign_registrations(device))
    _tally(report)
    return report


def _no_kernel_today(entry: Entry) -> bool:
    """An entry whose reference defect is a missing Autocast kernel (PyTorch today enters
    none): entering none is PyTorch's own behaviour there, tracked as that defect."""
    use = entry.reference_defect
    return use is not None and not use.kernel and use.defect.applies()


def _tally(report: Report) -> None:
    """Sort the policy's overloads into covered, reached but not checked, excluded and
    missing, and collect the entries and exclusions that do not fit the policy."""
    in_policy = set(report.policy)
    for reach in report.reaches:
        for name in reach.checked:
            report.covered.setdefault(name, []).append(reach.entry.id)
        if reach.skipped:
            continue
        if reach.entry.policy == "builtin_promote":
            if reach.overloads:
                report.unexpected_kernels.append(reach)
        elif not reach.overloads and not _no_kernel_today(reach.entry):
            report.outside_policy.append(reach)
    for reach in report.reaches:
        for name in reach.overloads:
            if name not in report.covered:
                report.unchecked.setdefault(name, []).append(reach.why_unchecked(name))
    fake, dtypes = report.target.fake, report.amp_dtypes
    for exclusion in (x for x in report.lists.exclusions if x.applies(fake, dtypes)):
        if exclusion.overload not in in_policy:
            report.stale_exclusions.append(exclusion)
        elif exclusion.overload in report.covered:
            report.needless_exclusions.append(exclusion)
        else:
            report.excluded[exclusion.overload] = exclusion
            report.unchecked.pop(exclusion.overload, None)
    unplaced = [n for n in report.policy if n not in report.covered
                and n not in report.excluded and n not in report.unchecked]
    named = report.lists.libraries
    for name in unplaced:
        library = name.partition("::")[0]
        if library != "aten" and library not in named:
            report.foreign[name] = (
                f"an op of library '{library}', which no op list names: an op list that "
                "names its ops with their library (op = \"<library>::<op>\") and imports it "
                "([list] imports) checks them")
    report.missing = [n for n in unplaced if n not in report.foreign]
    report.policy = [n for n in report.policy if n not in report.foreign]


def _conditions(x: oplist.Exclusion) -> str:
    """An exclusion's conditions in words, for the note saying it does not hold here."""
    words = [f"only {'with' if x.fake else 'without'} --fake"] if x.fake is not None else []
    if x.requires:
        words.append(f"only where the machine lacks {x.requires}")
    return ", ".join(words)


def _raised(r: Reach, error: str) -> tuple[bool, str]:
    """A note on an entry that raised while observed: PyTorch's own recorded defect, or an
    entry whose own skip applies here, needs no action; anything else is the device's or
    the entry's, for its items to say which."""
    said = f"entry {r.entry.id} raised while observed: {error}"
    use = r.entry.reference_defect
    if use is not None and use.defect.applies():
        return False, f"{said} — PyTorch's own defect {use.id} (oplists/defects.toml), recorded"
    if r.unchecked:  # the entry says why it cannot run here (a CPU without a primitive)
        why = r.unchecked if len(r.unchecked) <= 120 else r.unchecked[:119] + "…"
        return False, f"{said} — the entry's policy check skips here: {why}"
    return True, (f"{said} — a kernel the device lacks or an entry that does not fit it: "
                  "the entry's items in the suite's run say which")


def notes_of(report: Report, verbose: bool = True) -> list[tuple[bool, str]]:
    """The report's notes, each with whether it asks something of the list's owner."""
    return (
        [(True, f"exclude {x.overload}: entries reach it anyway "
                f"({', '.join(report.covered[x.overload])}) — the [[exclude]] can go")
         for x in report.needless_exclusions]
        + [(True, f"entry {r.entry.id} ({r.entry.category}) expects builtin promotion but "
                  f"enters {', '.join(r.overloads)} — its category or the device's policy is "
                  "wrong") for r in report.unexpected_kernels]
        + [(False, f"entry {r.entry.id}: not observed: {r.skipped} — it is for other runs")
           for r in report.reaches if r.skipped]
        + [(False, f"exclude {x.overload}: {x.version_gap()} — it is for other torch versions")
           for x in report.lists.exclusions if x.version_gap()]
        + [(False, f"exclude {x.overload}: does not hold in this run ({_conditions(x)}) — it "
                   "is for other runs")
           for x in report.lists.exclusions
           if x.version_gap() is None and not x.applies(report.target.fake, report.amp_dtypes)]
        + ([_raised(r, e) for r in report.reaches for e in r.errors
            if r not in report.outside_policy] if verbose else [])
    )


def format_report(report: Report, verbose: bool = True) -> str:
    """The report as printed by ``python -m amp_conformance coverage``."""
    lines = [
        f"{report.key} in torch {torch.__version__}: {len(report.policy)} overloads; "
        f"{len(report.reaches)} entries of {', '.join(report.lists.paths) or 'no list'} "
        f"observed on {report.target}"
        + (f" (derived from {report.lists.derived_from})" if report.lists.derived_from else ""),
    ]
    if verbose:
        lines.append(f"covered ({len(report.covered)}):")
        for name in sorted(report.covered):
            lines.append(f"  {name}  <- {', '.join(report.covered[name])}")
    lines.append(f"reached but not checked ({len(report.unchecked)}):")
    for name in sorted(report.unchecked):
        lines.append(f"  {name}  <- {'; '.join(report.unchecked[name])}")
    lines.append(f"excluded ({len(report.excluded)}):")
    for name, exclusion in sorted(report.excluded.items()):
        lines.append(f"  {name}: {exclusion.reason} [{exclusion.path}]")
    lines.append(f"uncovered ({len(report.missing)}):")
    for name in report.missing:
        lines.append(f"  {name}: no entry reaches it and no [[exclude]] names it")
    if report.foreign:
        lines.append(f"foreign registrations, not checkable ({len(report.foreign)}):")
        lines.extend(f"  {name}: {why}" for name, why in sorted(report.foreign.items()))
    problems = (
        [f"  entry {r.entry.id} ({r.entry.category}, {r.entry.qualname}): enters no "
         f"{report.key} kernel" + (f" ({'; '.join(r.errors)})" if r.errors else "")
         for r in report.outside_policy]
        + [f"  exclude {x.overload}: not in the {report.key} policy [{x.path}]"
           for x in report.stale_exclusions]
    )
    lines.append(f"listed but not in policy ({len(problems)}):")
    lines.extend(problems)
    notes = notes_of(report, verbose)
    if notes:
        acts = sum(1 for act, _ in notes if act)
        lines.append(f"notes ({len(notes)}: {acts} to act on, {len(notes) - acts} for information):")
        lines.extend(f"  {'ACT ' if act else 'info'} {text}" for act, text in notes)
    lines.append(report.summary)
    return "\n".join(lines)


def check(
    device: str, lists: OpList, target: Target, amp_dtypes: Sequence[torch.dtype],
    numerics: str = "bitwise",
) -> Report:
    """Raise ConformanceFailure naming every policy overload neither covered nor excluded:
    the missing ones and those reached only where nothing checks them."""
    report = compute(device, lists, target, amp_dtypes, numerics)
    if not report.failed:
        return report
    parts = [f"{report.summary}: in torch {torch.__version__}:"]
    if report.missing:
        parts.append(f"these {report.key} overloads are neither reached by an op-list entry "
                     "nor excluded with a reason:")
        parts += [f"  {name}" for name in report.missing]
    if report.unchecked:
        parts.append(f"these {report.key} overloads are reached but not checked (only by "
                     f"entries whose policy check is skipped on {target}, or by calls that "
                     "raised):")
        parts += [f"  {name}  <- {'; '.join(report.unchecked[name])}"
                  for name in sorted(report.unchecked)]
    parts.append("add entries whose policy check reaches them here (or [[exclude]] tables with "
                 "the reason they cannot be checked here) to the op list of "
                 f"{device}: {', '.join(lists.paths) or '(none)'}")
    raise ConformanceFailure("\n".join(parts))
