"""Which overloads of a device's autocast policy the op lists really exercise.

The policy is what the running torch registers: every operator overload with a kernel
for the device's ``Autocast<Device>`` dispatch key. An op-list entry covers the overloads
its call *reaches* under autocast, which is observed rather than guessed from its name:
``torch.matmul`` on CUDA reaches ``aten::matmul`` (whose autocast kernel stops there) but
on a device without a matmul kernel it reaches ``aten::mm``; ``F.cross_entropy`` reaches
``aten::cross_entropy_loss`` on CPU and ``log_softmax`` + ``nll_loss`` on CUDA.

How it is observed: while an entry runs, a Python kernel is registered for every policy
overload under a dispatch key that sits *above* all ``Autocast*`` keys and is otherwise
unused (``TESTING_ONLY_GenericWrapper``, made part of every dispatch through the
thread-local include set, with a fallthrough for all other ops). Such a kernel sees the
call exactly as the autocast kernel is about to: it records the overload when autocast is
enabled for the device and a tensor argument carries the device's autocast key, then
redispatches below itself, so the real autocast kernel runs unchanged (casts included)
and the rest of the call behaves as without the observer. Calls made *inside* an
autocast kernel run with autocast excluded, so they are not counted: only kernels the
entry's own call enters are. Everything registered is destroyed on exit, also when the
call fails.

Overloads that cannot be reached from Python, or need hardware features, are excluded
with a written reason in the op list (``[[exclude]]``); everything else must be covered.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from amp_conformance.checks.case import Case
from amp_conformance.core import devices
from amp_conformance.core.backend import BackendError, import_backend
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target, fake_supported
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import Entry, OpList

#: A dispatch key above every Autocast key with no kernels of its own in torch: the
#: observer's slot. (A key below autocast would see the call after casting, and the
#: fp32_append_dtype kernels redispatch to another overload, e.g. norm.Scalar to
#: norm.ScalarOpt_dtype, so the entered overload would be lost.)
OBSERVER_KEY = "TESTING_ONLY_GenericWrapper"


def policy_overloads(device: str) -> list[str]:
    """Every op overload the running torch registers a kernel for under the device's key."""
    key = devices.dispatch_key(device)
    return sorted(
        name for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    )


def _op_overload(name: str) -> Any:
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")


class Observer:
    """Records which of ``overloads`` have their ``Autocast<device>`` kernel entered.

    Use as a context manager (installs and, on exit, removes the observing kernels), and
    :meth:`recording` around the calls to observe.
    """

    def __init__(self, device: str, overloads: Sequence[str]):
        self.device = device
        self.key = devices.dispatch_key(device)
        self.overloads = list(overloads)
        self._seen: list[str] | None = None
        self._libraries: list[torch.library.Library] = []
        self._stack = contextlib.ExitStack()

    def _kernel(self, name: str) -> Callable[..., Any]:
        op = _op_overload(name)
        below = torch._C.DispatchKeySet(OBSERVER_KEY)

        def observe(*args: Any, **kwargs: Any) -> Any:
            if self._seen is not None and self._enters_autocast(args, kwargs):
                self._seen.append(name)
            with torch._C._ExcludeDispatchKeyGuard(below):
                return op(*args, **kwargs)

        return observe

    def _enters_autocast(self, args: tuple, kwargs: dict) -> bool:
        """Whether this call reaches the device's autocast kernel next: autocast is on for
        the device (its key is not excluded) and some tensor argument carries the key."""
        if torch._C._dispatch_tls_is_dispatch_key_excluded(self.key):
            return False
        return any(
            isinstance(t, torch.Tensor) and torch._C._dispatch_keys(t).has(self.key)
            for t in tree_leaves((args, kwargs))
        )

    def __enter__(self) -> Observer:
        try:
            fallback = torch.library.Library("_", "IMPL", OBSERVER_KEY)
            self._libraries.append(fallback)
            fallback.fallback(torch.library.fallthrough_kernel)
            by_namespace: dict[str, torch.library.Library] = {}
            for name in self.overloads:
                namespace, _, rest = name.partition("::")
                if namespace not in by_namespace:
                    by_namespace[namespace] = torch.library.Library(namespace, "IMPL")
                    self._libraries.append(by_namespace[namespace])
                by_namespace[namespace].impl(rest, self._kernel(name), OBSERVER_KEY)
            self._stack.enter_context(torch._C._IncludeDispatchKeyGuard(OBSERVER_KEY))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._remove()

    def _remove(self) -> None:
        self._stack.close()
        while self._libraries:
            self._libraries.pop()._destroy()

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[str]]:
        """Collect, in call order, the policy overloads entered inside the block."""
        seen: list[str] = []
        self._seen = seen
        try:
            yield seen
        finally:
            self._seen = None


@dataclass(frozen=True)
class Reach:
    """What one entry's call entered under autocast, and whether it ran to the end."""

    entry: Entry
    overloads: tuple[str, ...]
    errors: tuple[str, ...] = ()
    skipped: str | None = None


@dataclass
class Report:
    device: str
    key: str
    target: Target
    policy: list[str]
    reaches: list[Reach]
    lists: OpList
    covered: dict[str, list[str]] = field(default_factory=dict)
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

    @property
    def summary(self) -> str:
        return (f"coverage {self.device}: {len(self.covered)}/{len(self.policy)} covered, "
                f"{len(self.excluded)} excluded, {len(self.missing)} missing")


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


def _amp_dtype_for(entry: Entry, dtypes: Sequence[torch.dtype]) -> torch.dtype | None:
    for dtype in dtypes:
        if entry.amp_dtypes is None or devices.dtype_name(dtype) in entry.amp_dtypes:
            return dtype
    return None


def observe(
    entry: Entry, target: Target, amp_dtype: torch.dtype, observer: Observer
) -> Reach:
    """Run every variant of ``entry`` under autocast and record the overloads it enters.

    A call that raises still counts for what it entered before raising (a banned op
    raises in its autocast kernel by design; some fake kernels are missing); the error
    is kept so the report can show it.
    """
    case = Case(target, amp_dtype, entry)
    errors: list[str] = []
    reached: list[str] = []
    dev = target.device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with unchanged_autocast_state(dev, f"the coverage observation of {entry.qualname}"):
            with target.tensors():
                try:
                    args, kwargs = case.build_inputs()
                except Exception as exc:  # noqa: BLE001 - reported, never hidden
                    return Reach(entry, (), (f"building inputs: {describe_error(exc)}",))
                for name, fn in oplist.variants(entry):
                    with observer.recording() as seen:
                        try:
                            with target.autocast(amp_dtype):
                                fn(*args, **kwargs)
                        except Exception as exc:  # noqa: BLE001 - reported, never hidden
                            errors.append(f"{name}: {describe_error(exc)}")
                    reached.extend(seen)
    return Reach(entry, tuple(dict.fromkeys(reached)), tuple(errors))


def compute(
    device: str,
    lists: OpList,
    target: Target | None = None,
    amp_dtypes: Sequence[torch.dtype] | None = None,
) -> Report:
    """Observe every applicable entry and compare what they reach with the policy."""
    target = target or default_target(device)
    if amp_dtypes is None:
        supported = devices.supported_amp_dtypes(device, target.fake)
        default = devices.default_amp_dtype(device)
        amp_dtypes = [default, *[d for d in supported if d != default]]
    policy = policy_overloads(device)
    reaches: list[Reach] = []
    with Observer(device, policy) as observer:
        for entry in lists.entries:
            gap = entry.version_gap()
            dtype = _amp_dtype_for(entry, amp_dtypes)
            if gap or dtype is None:
                reaches.append(Reach(entry, (), (), gap or "no autocast dtype of this run applies"))
                continue
            reaches.append(observe(entry, target, dtype, observer))
    report = Report(device, devices.dispatch_key(device), target, policy, reaches, lists)
    in_policy = set(policy)
    for reach in reaches:
        for name in reach.overloads:
            report.covered.setdefault(name, []).append(reach.entry.id)
        if reach.skipped:
            continue
        if reach.entry.policy == "builtin_promote":
            if reach.overloads:
                report.unexpected_kernels.append(reach)
        elif not reach.overloads:
            report.outside_policy.append(reach)
    exclusions = [x for x in lists.exclusions if x.version_gap() is None]
    for exclusion in exclusions:
        if exclusion.overload not in in_policy:
            report.stale_exclusions.append(exclusion)
        elif exclusion.overload in report.covered:
            report.needless_exclusions.append(exclusion)
        else:
            report.excluded[exclusion.overload] = exclusion
    report.missing = [n for n in policy if n not in report.covered and n not in report.excluded]
    return report


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
    lines.append(f"excluded ({len(report.excluded)}):")
    for name, exclusion in sorted(report.excluded.items()):
        lines.append(f"  {name}: {exclusion.reason} [{exclusion.path}]")
    lines.append(f"uncovered ({len(report.missing)}):")
    for name in report.missing:
        lines.append(f"  {name}: no entry reaches it and no [[exclude]] names it")
    problems = (
        [f"  entry {r.entry.id} ({r.entry.category}, {r.entry.qualname}): enters no "
         f"{report.key} kernel" + (f" ({'; '.join(r.errors)})" if r.errors else "")
         for r in report.outside_policy]
        + [f"  exclude {x.overload}: not in the {report.key} policy [{x.path}]"
           for x in report.stale_exclusions]
    )
    lines.append(f"listed but not in policy ({len(problems)}):")
    lines.extend(problems)
    notes = (
        [f"  exclude {x.overload}: entries reach it anyway ({', '.join(report.covered[x.overload])})"
         for x in report.needless_exclusions]
        + [f"  entry {r.entry.id} ({r.entry.category}) expects builtin promotion but enters "
           f"{', '.join(r.overloads)}" for r in report.unexpected_kernels]
        + [f"  entry {r.entry.id}: not observed: {r.skipped}" for r in report.reaches if r.skipped]
        + [f"  exclude {x.overload}: {x.version_gap()}"
           for x in report.lists.exclusions if x.version_gap()]
    )
    if verbose:
        notes += [f"  entry {r.entry.id} raised while observed: {e}"
                  for r in report.reaches for e in r.errors if r not in report.outside_policy]
    if notes:
        lines.append(f"notes ({len(notes)}):")
        lines.extend(notes)
    lines.append(report.summary)
    return "\n".join(lines)


def check(
    device: str, lists: OpList, target: Target, amp_dtypes: Sequence[torch.dtype]
) -> Report:
    """Raise ConformanceFailure naming every policy overload neither covered nor excluded."""
    report = compute(device, lists, target, amp_dtypes)
    if report.missing:
        raise ConformanceFailure(
            f"{report.summary}: these {report.key} overloads of torch {torch.__version__} are "
            f"neither reached by an op-list entry nor excluded with a reason:\n"
            + "\n".join(f"  {name}" for name in report.missing)
            + "\nadd entries that reach them (or [[exclude]] tables with the reason they cannot "
            "be reached from Python) to the op list of "
            f"{device}: {', '.join(lists.paths) or '(none)'}"
        )
    return report


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
    """The device's lists; an ``--oplist`` for another device is refused, not ignored."""
    lists = oplist.load(device, extra)
    used = set(lists.paths)
    unused = [str(p) for p in map(Path, extra) if str(p) not in used]
    if unused:
        raise oplist.OpListError(unused[0], errors=[oplist.Problem(
            p, None, None, f"describes another device than {device!r}: its [list] device is "
                           f"{oplist.parse_file(p).device!r}") for p in unused])
    return lists


def run(args: argparse.Namespace) -> int:
    """Print the coverage report; exit status 1 when an overload is missing, 2 on bad input."""
    try:
        for module in args.backend_module:
            import_backend(module)
        _device(args.device)
        target = default_target(args.device, args.fake)
        lists = _lists(args.device, args.oplist)
    except (devices.DeviceError, oplist.OpListError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = compute(args.device, lists, target)
    print(format_report(report, verbose=not args.quiet))
    return 1 if report.missing else 0
