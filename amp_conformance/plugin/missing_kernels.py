"""A kernel the device lacks is a named cause, not the backend's raw exception.

When an item fails because the dispatcher found no kernel for an op on the device
("Could not run 'aten::X' with arguments from the 'PrivateUse1' backend", or a backend in
Python's "all __torch_dispatch__ handlers returned NotImplemented", raised or quoted in a
check's message), the item says "``<device>`` has no kernel for ``aten::X``"; where an
exception of the backend's own class (a class no package of torch, the suite or Python
defines) names the op, "``<device>`` cannot run ``aten::X``". Where the backend's words
name no op, an op-list item is judged by behaviour: if the entry's own call raises on the
device outside autocast too, on its inputs as made and on them cast by hand to the amp
dtype, the item says "``<device>`` cannot run ``X`` (outside autocast too): <what it
raised>" (``X`` the ``aten::`` op its error names, else the entry's op). Each is a failure
where the op is in the device's policy (an op of its op lists, the item's own op, or one its
own call cannot run without: conv2d at ``aten::convolution``), a not-applicable skip where
the check only needs it as a tool (GradScaler's kernels for a training check), once the
item's failure is proved not autocast's (:mod:`amp_conformance.plugin.excuses`: an autocast
kernel that calls an op the device lacks names that op too). Either way the causes table
groups the items one row per op (:mod:`amp_conformance.plugin.report.causes`). An item the
vendor declared an expected failure keeps its verdict, and so does one of a check that
needs a capability (sparse gradients): the kernels it lacks are what the capability
declares, and ``run --draft-declarations`` drafts it from the failure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import pytest

from amp_conformance.checks import registry
from amp_conformance.checks.case import load_oplist
from amp_conformance.core.casting import hand_cast, settle
from amp_conformance.core.errors import (
    ConformanceFailure,
    describe_error,
    missing_kernel,
    refused_op,
)
from amp_conformance.plugin import excuses
from amp_conformance.plugin.items import check_of, is_conformance
from amp_conformance.plugin.session_settings import settings

#: the phrases the causes table keeps whole (one row per op)
PHRASE = "has no kernel for"
CANNOT = "cannot run"
_ATEN = re.compile(r"\baten::[\w.]+")
OWN = "an op of its autocast policy"


def base_name(op: str) -> str:
    """``aten::mm.out`` -> ``mm``; ``torch.nn.functional.conv2d`` -> ``conv2d``."""
    return op.split("::")[-1].split(".")[0] if "::" in op else op.rsplit(".", 1)[-1]


@functools.cache
def _policy(device: str, extra: tuple[str, ...]) -> frozenset[str]:
    return frozenset(base_name(e.op) for e in load_oplist(device, extra).entries)


def _entry_call(case: Any) -> tuple[Callable[..., Any], Any, Any]:
    """The entry's own call (its first variant) and its inputs as made."""
    from amp_conformance.checks.reproduction import callables

    args, kwargs = case.build_inputs()
    return callables(case)[0][1], args, kwargs


def _reaches(case: Any, op: str) -> bool:
    """Whether the entry's own call, outside autocast, stops at the missing kernel for
    ``op`` (conv2d at aten::convolution): then the op of the policy cannot run at all."""
    try:
        call, args, kwargs = _entry_call(case)
        call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - only which kernel it lacks matters
        return (missing_kernel(exc) or refused_op(exc)) == op
    return False


def cannot_run(case: Any, device: str) -> str | None:
    """``"X (outside autocast too): <what it raised>"`` where the entry's own call raises on
    the device outside autocast, on its inputs as made and on them cast by hand to the amp
    dtype (a kernel the device has in neither dtype), else None."""
    try:
        call, args, kwargs = _entry_call(case)
    except Exception:  # noqa: BLE001 - no call to make: nothing to learn from it
        return None
    raised: Exception | None = None
    for dtype in (None, case.amp_dtype):
        try:
            if dtype is None:
                settle(call(*args, **kwargs))
            else:
                settle(call(*hand_cast(args, dtype, device), **hand_cast(kwargs, dtype, device)))
        except Exception as exc:  # noqa: BLE001 - whatever the backend raises
            raised = exc
        else:
            return None  # it runs in one dtype at least: not a kernel it lacks
    said = describe_error(raised, 200) if raised is not None else ""
    named = _ATEN.search(said)
    op = named.group(0) if named else case.entry.qualname
    return f"{op} (outside autocast too): {said}"


def in_policy(op: str, item: pytest.Item, device: str) -> str | None:
    """How ``op`` belongs to the device's policy ("an op of its autocast policy": the item's
    own op or one its op lists give a policy; "which its policy's conv2d needs": one the
    item's own call cannot run without), or None (a tool of the check)."""
    own = (getattr(getattr(item, "callspec", None), "params", {}) or {}).get("amp_case")
    name = base_name(op)
    if own is not None and base_name(own.entry.op) == name:
        return OWN
    try:
        if name in _policy(device, tuple(settings(item.config).oplists or ())):
            return OWN
    except Exception:  # noqa: BLE001 - no op lists to read: the item's own op alone
        pass
    if own is not None and _reaches(own, op):
        return f"which its policy's {base_name(own.entry.op)} needs"
    return None


def _ours(error: BaseException) -> bool:
    """Whether the suite itself raised it (a check's verdict): no backend's error then, unless
    the verdict quotes one (it raised while the check made its call)."""
    return isinstance(error, (ConformanceFailure, AssertionError)) and " raised " not in str(error)


def _capability(item: pytest.Item) -> bool:
    check = registry.REGISTRY.get(check_of(item) or "")
    return bool(check is not None and check.capability)


def message(device: str, op: str, policy: str | None, phrase: str = PHRASE) -> str:
    if policy is None:
        return (f"not applicable: {device} {phrase} {op}, which this check needs as a tool "
                "(not an op of its policy)")
    return f"{device} {phrase} {op}, {policy}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if (call.excinfo is None or not report.failed or hasattr(report, "wasxfail")
            or not is_conformance(item) or _capability(item)):
        return report
    error, device = call.excinfo.value, settings(item.config).device
    op, phrase = missing_kernel(error), PHRASE
    case = (getattr(getattr(item, "callspec", None), "params", {}) or {}).get("amp_case")
    if op is None and case is not None and not _ours(error):  # an op-list item: behaviour
        lacks = cannot_run(case, device)
        if lacks is not None:
            report.longrepr = f"{device} {CANNOT} {lacks}\n{report.longrepr}"
            return report
    if op is None:  # a check's tool, in the backend's own words
        op, phrase = refused_op(error), CANNOT
    if op is None:
        return report
    policy = in_policy(op, item, device)
    if policy is not None:
        report.longrepr = f"{message(device, op, policy, phrase)}\n{report.longrepr}"
    else:
        said = message(device, op, None, phrase)
        if phrase == CANNOT:  # the backend's own words, which no other line of the skip keeps
            said += f": {describe_error(error, 200)}"
        excuses.excuse(item, report, call, "missing kernel", said)
    return report
