"""The reference autocast: the device's declared policy, applied in Python where it says.

The op lists say what each entry's call must do under autocast; which overload of the
policy that call enters is observed once per process (the kernel-entry observer of
:mod:`amp_conformance.core.dispatch`), giving a rule per policy overload: ``lower``,
``fp32``, ``fp32_opt_dtype``, ``promote`` or ``banned``. A Python kernel for each of those
overloads, on a dispatch key above every Autocast key (``TESTING_ONLY_GenericMode``, which
torch leaves empty, beside the observer's ``TESTING_ONLY_GenericWrapper``), applies the rule
to the call's arguments and runs the op below it. With autocast off and the key included
(:func:`casting`), any call runs exactly as the declared policy says autocast should run
it: a policy op is cast at its own overload, a composite op at the policy ops its
decomposition reaches, an op that reaches none is not cast at all. That run is the
hand-cast control of every OpInfo sample (the ``opinfo`` tier) and of every module's
computation (the ``modules`` family).

Where an overload is entered directly by an entry (the overload's name is the entry's op)
that entry's policy wins over one whose call reaches it on the way (``cross_entropy``
reaching ``log_softmax``); disagreements that remain are kept in ``conflicts``.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast, is_eligible, tensors_in
from amp_conformance.core.dispatch import op_overload, shared_observer
from amp_conformance.core.target import Target
from amp_conformance.schema.defects import DefectUse
from amp_conformance.schema.oplist import variants

REFERENCE_KEY = "TESTING_ONLY_GenericMode"
RULES = ("lower", "fp32", "fp32_opt_dtype", "promote", "banned")


class ReferenceBanned(RuntimeError):
    """The declared policy bans the op under autocast: the device must raise its error."""


@dataclass(frozen=True)
class Rule:
    """What the declared policy does at one overload, and the entries that say so."""

    overload: str
    policy: str
    entries: tuple[str, ...]
    #: banned: the start of the error the device raises
    error: str | None = None
    #: what PyTorch does today where an entry records a reference defect of its own
    defects: tuple[DefectUse, ...] = ()


@dataclass
class PolicyTable:
    """The declared policy of one device and autocast dtype, overload by overload."""

    device: str
    amp_dtype: torch.dtype
    rules: dict[str, Rule] = field(default_factory=dict)
    #: overloads whose entries disagree on the policy: the entries, the rule kept first
    conflicts: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _base(overload: str) -> str:
    return overload.partition("::")[2].partition(".")[0]


def _observe(entry: Any, target: Target, amp_dtype: torch.dtype) -> list[str]:
    """The policy overloads the entry's first variant enters under the device's autocast."""
    observer = shared_observer(target.device)
    case = Case(target, amp_dtype, entry)
    with warnings.catch_warnings(), target.tensors():
        warnings.simplefilter("ignore")
        try:
            args, kwargs = case.build_inputs()
        except Exception:  # noqa: BLE001 - an entry that cannot build here declares nothing
            return []
        _, fn = variants(entry)[0]
        with observer.recording() as seen:
            try:
                with target.autocast(amp_dtype):
                    fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - what it entered before raising still counts
                pass
    return list(dict.fromkeys(seen))


@functools.cache
def policy_table(target: Target, amp_dtype: torch.dtype, extra: tuple[str, ...] = ()) -> PolicyTable:
    """The rule of every policy overload the device's op lists reach (once per process)."""
    table = PolicyTable(target.device, amp_dtype)
    found: dict[str, list[tuple[bool, Any]]] = {}
    for entry in load_oplist(target.device, extra).entries:
        if entry.policy not in RULES or entry.version_gap() or (
                entry.amp_dtypes is not None
                and devices.dtype_name(amp_dtype) not in entry.amp_dtypes):
            continue
        for overload in _observe(entry, target, amp_dtype):
            found.setdefault(overload, []).append((_base(overload) == entry.op, entry))
    for overload, candidates in found.items():
        direct = [e for is_direct, e in candidates if is_direct]
        chosen = direct or [e for _, e in candidates]
        policies = dict.fromkeys(e.policy for e in chosen)
        first = next(iter(policies))
        agreeing = [e for e in chosen if e.policy == first]
        if len(policies) > 1:
            table.conflicts[overload] = tuple(f"{e.id} ({e.policy})" for e in chosen)
        table.rules[overload] = Rule(
            overload, first, tuple(e.id for e in agreeing),
            error=next((e.error for e in agreeing if e.error), None),
            defects=tuple(dict.fromkeys(e.reference_defect for e in agreeing
                                        if e.reference_defect is not None)))
    return table


# -- applying a rule ---------------------------------------------------------------------


def promote_dtype(amp_dtype: torch.dtype, values: Any, device: str) -> torch.dtype:
    """The promote policy's widest type: the autocast dtype, widened by every eligible
    input (float32 wins; float16 beside bfloat16 is float32, the widest type)."""
    widest = amp_dtype
    for t in tensors_in(values):
        if is_eligible(t, device) and t.dtype != widest:
            widest = torch.float32
    return widest


def _with_default_dtype(op: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``fp32_opt_dtype``: the call's optional dtype set to float32 where it passes none."""
    for index, argument in enumerate(op._schema.arguments):
        if argument.name != "dtype":
            continue
        given = args[index] if index < len(args) else kwargs.get("dtype")
        if given is not None:
            return args, kwargs
        if index < len(args):
            return (*args[:index], torch.float32, *args[index + 1:]), kwargs
        return args, {**kwargs, "dtype": torch.float32}
    return args, kwargs


def apply(rule: Rule, op: Any, amp_dtype: torch.dtype, device: str,
          args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call's arguments as the rule has autocast pass them on."""
    if rule.policy == "banned":
        raise ReferenceBanned(rule.error or f"{rule.overload} is banned under autocast")
    if rule.policy == "fp32_opt_dtype":
        first = args[0] if args else None
        eligible = isinstance(first, torch.Tensor) and is_eligible(first, device)
        return _with_default_dtype(op, args, kwargs) if eligible else (args, kwargs)
    if rule.policy == "promote":
        to = promote_dtype(amp_dtype, (args, kwargs), device)
    else:
        to = amp_dtype if rule.policy == "lower" else torch.float32
    return hand_cast(args, to, device), hand_cast(kwargs, to, device)


# -- the kernels -------------------------------------------------------------------------

_ACTIVE: list[tuple[PolicyTable, list[str]]] = []
_LIBRARIES: dict[str | None, torch.library.Library] = {}
_KERNELS: set[str] = set()


def _kernel(name: str) -> Any:
    op = op_overload(name)
    below = torch._C.DispatchKeySet(REFERENCE_KEY)

    def reference(*args: Any, **kwargs: Any) -> Any:
        table, cast_at = _ACTIVE[-1] if _ACTIVE else (None, None)
        rule = table.rules.get(name) if table is not None else None
        if rule is not None and _on_device(table.device, args, kwargs):
            cast_at.append(name)
            args, kwargs = apply(rule, op, table.amp_dtype, table.device, args, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(below):
            return op(*args, **kwargs)

    return reference


def _on_device(device: str, args: tuple, kwargs: dict) -> bool:
    """Whether the device's autocast would see this call: a tensor argument carries the
    device's Autocast key."""
    key = devices.dispatch_key(device)
    return any(isinstance(t, torch.Tensor) and torch._C._dispatch_keys(t).has(key)
               for t in tree_leaves((args, kwargs)))


_INSTALLED_FOR: list[str] = []  # the device whose tables the registered kernels serve


def install(table: PolicyTable) -> None:
    """Register the reference kernels of the table's overloads (once each per process and
    device: a table of another device first removes the kernels of the last one, which
    otherwise keep serving that device's overloads, seen with cpu then fake cuda)."""
    if _INSTALLED_FOR and _INSTALLED_FOR[0] != table.device:
        release()
    if not _INSTALLED_FOR:
        _INSTALLED_FOR.append(table.device)
    if None not in _LIBRARIES:
        fallback = torch.library.Library("_", "IMPL", REFERENCE_KEY)
        fallback.fallback(torch.library.fallthrough_kernel)
        _LIBRARIES[None] = fallback
    for name in table.rules:
        if name in _KERNELS:
            continue
        namespace, _, rest = name.partition("::")
        if namespace not in _LIBRARIES:
            _LIBRARIES[namespace] = torch.library.Library(namespace, "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _LIBRARIES[namespace].impl(rest, _kernel(name), REFERENCE_KEY)
        _KERNELS.add(name)


def release() -> None:
    """Remove every reference kernel (the plugin calls it when the session ends)."""
    while _LIBRARIES:
        _LIBRARIES.popitem()[1]._destroy()
    _KERNELS.clear()
    _INSTALLED_FOR.clear()


@contextlib.contextmanager
def casting(table: PolicyTable) -> Iterator[list[str]]:
    """Run calls through the reference autocast of ``table`` (autocast itself stays as it
    is: call this with autocast off); yields the overloads it cast at, in call order."""
    install(table)
    cast_at: list[str] = []
    _ACTIVE.append((table, cast_at))
    try:
        with torch._C._IncludeDispatchKeyGuard(REFERENCE_KEY):
            yield cast_at
    finally:
        _ACTIVE.pop()
