"""A backend's limits named once, from a probe, instead of as the raw exceptions of the
items that meet them.

Some backends cannot do what whole checks stand on: autograd that does not reach their
tensors (their ops run without it), a layout they lack (sparse), modes that exist only in
the thread that entered them. A check that meets such a limit learns nothing of autocast,
and its item must not fail as if it had found a departure. Where a conformance item fails
and the vendor declared nothing about the capability, the limit's probe runs (once per
process, in the main thread, only after a failure: a conforming device pays nothing): a
few lines that need the capability and nothing else (a probe that fails before reaching
it, in a forward or on a kernel the device lacks, is no evidence). If the probe fails too,
and the item needs the capability (its check's or its ``amp_needs`` marker) or failed the
probe's own way (class, op and first line), the item is a not-applicable skip naming the
limit and the probe's evidence, once its own failure is proved not autocast's
(:mod:`amp_conformance.plugin.excuses`: a probe is evidence of the device, not of the item).
The report counts these skips per limit (``causes.limits``); a vendor who knows the limit
declares it (``--capabilities``: ``autograd = false``) and the items skip without running.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from amp_conformance.checks import registry
from amp_conformance.core.casting import hand_cast, tensors_in
from amp_conformance.core.errors import chain, describe_error, missing_kernel, refused_op, signature
from amp_conformance.core.target import Target
from amp_conformance.plugin import excuses
from amp_conformance.plugin.items import check_of, is_conformance
from amp_conformance.plugin.session_settings import settings
from amp_conformance.plugin.vendor import declarations

#: how a limit's skip begins: ``not applicable: <device> limit: <what> (probe: …)``
PHRASE = "limit:"
_THREAD_WAIT = 30.0


class _Shown(Exception):
    """A probe that ran but showed the limit without an exception of the backend's."""


class _NoEvidence(Exception):
    """A probe that failed before reaching its capability: it tells nothing of the limit."""


@dataclass(frozen=True)
class Limit:
    """One limit: the capability it takes away, what it means, and its probe (code shown
    as evidence; ``run`` raises where the device has the limit)."""

    capability: str
    what: str
    probe: str
    run: Callable[[str], None]
    #: its probe tells on a fake device too: the fake refuses what the device refuses
    #: (``DeviceProfile.refuses``), where the other limits are the hardware's
    fake: bool = False


def _autograd(device: str) -> None:
    with torch.enable_grad():
        try:  # the forward: where it raises, the device lacks a kernel, not autograd
            x = torch.ones(2, device=device).requires_grad_()
            leaf = (x * x).sum()
            layer = torch.nn.Linear(2, 2).to(device)  # what the checks train: moved parameters
            moved = layer(torch.ones(1, 2, device=device)).sum()
        except Exception as exc:  # noqa: BLE001 - no evidence of this limit
            raise _NoEvidence from exc
        try:
            leaf.backward()
            if x.grad is None:
                raise _Shown("x.grad is None after backward()")
            moved.backward()
        except Exception as exc:
            if missing_kernel(exc) or refused_op(exc):  # a kernel it lacks, again
                raise _NoEvidence from exc
            raise
    if layer.weight.grad is None:
        raise _Shown("the moved layer's weight.grad is None after backward()")


def _sparse(device: str) -> None:
    made = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (3,))
    made.to(device).coalesce().to_dense().cpu()


def _threads(device: str) -> None:
    x = torch.ones(2, device=device)
    (x + x).cpu()  # runs in this thread (else the probe fails first: see shown())
    raised: list[BaseException] = []

    def work() -> None:
        try:
            (x + x).cpu()
        except BaseException as exc:  # noqa: BLE001 - whatever the backend raises there
            raised.append(exc)
    thread = threading.Thread(target=work, name="amp-conformance-probe", daemon=True)
    thread.start()
    thread.join(_THREAD_WAIT)
    if thread.is_alive():
        raise _Shown(f"the op did not finish in {_THREAD_WAIT:.0f} s")
    if raised:
        raise raised[0]


def _float64(device: str) -> None:
    torch.ones(2, dtype=torch.float64, device=device).add(1).cpu()


LIMITS = (
    Limit("autograd", "autograd does not reach its tensors",
          "(x * x).sum().backward() on a leaf tensor x of the device, then through "
          "torch.nn.Linear(2, 2).to(device)", _autograd),
    Limit("sparse_grads", "it has no sparse layout",
          "torch.sparse_coo_tensor(...).to(device).coalesce()", _sparse),
    Limit("threads", "its ops do not run in other threads",
          "(x + x).cpu() in a new thread, x made in the main one", _threads),
    Limit("float64", "it has no float64 tensors",
          "torch.ones(2, dtype=torch.float64, device=device).add(1).cpu()", _float64,
          fake=True),
)

#: (device, capability, fake) -> the probe's exception, or None where the device has it
_SEEN: dict[tuple[str, str, bool], BaseException | None] = {}


def _basics(device: str) -> None:
    """What every probe does before its capability: without it, no limit can be told."""
    (torch.ones(2, device=device) + 1).cpu()


def shown(limit: Limit, device: str, fake: bool = False) -> BaseException | None:
    """What the limit's probe raised on ``device`` (probed once per process; on its fake
    tensors where ``fake``), else None; None too where the device cannot even make and
    read back a tensor (no evidence of this limit rather than another)."""
    key = (device, limit.capability, fake)
    if key not in _SEEN:
        _SEEN[key] = None
        with warnings.catch_warnings(), Target(device, fake).tensors():
            warnings.simplefilter("ignore")  # the probe's warnings are nobody's item's
            _SEEN[key] = _probe(limit, device)
    return _SEEN[key]


def _probe(limit: Limit, device: str) -> BaseException | None:
    try:
        _basics(device)
    except Exception:  # noqa: BLE001 - nothing to tell a limit by
        return None
    try:
        limit.run(device)
    except _NoEvidence:
        return None
    except Exception as exc:  # noqa: BLE001 - any other failure of the probe is the evidence
        return exc
    return None


def _probe_failure(error: BaseException, evidence: BaseException) -> bool:
    """Whether the item failed the way the probe did: the same class, op and first line."""
    return any(signature(e) == signature(evidence) for e in chain(error))


def needs(item: pytest.Item) -> set[str]:
    """The capabilities an item stands on: its check's and its ``amp_needs`` markers'."""
    check = registry.REGISTRY.get(check_of(item) or "")
    found = {check.capability} if check is not None and check.capability else set()
    return found | {n for m in item.iter_markers("amp_needs") for n in m.args}


def message(device: str, limit: Limit, evidence: BaseException) -> str:
    return (f"not applicable: {device} {PHRASE} {limit.what} (probe: {limit.probe} raised "
            f"{describe_error(evidence, 200)})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201
    report = yield
    if (call.excinfo is None or not report.failed or hasattr(report, "wasxfail")
            or not is_conformance(item)):
        return report
    run = settings(item.config)
    if run.device == "cpu":
        return report
    declared = declarations(item.config).capabilities.values
    wanted = needs(item)
    limits = [limit for limit in LIMITS if limit.fake or not run.fake]
    try:  # a probe runs as the item started, never in what its failure left
        with excuses.clean_start(item, run.device):
            evidence_of = {limit.capability: shown(limit, run.device, run.fake)
                           for limit in limits if limit.capability not in declared}
    except excuses.DirtyDevice:
        return report  # no limit can be told on it: the proof says why (or the failure stands)
    for limit in limits:
        evidence = evidence_of.get(limit.capability)
        if evidence is None:
            continue
        if limit.capability in wanted or _probe_failure(call.excinfo.value, evidence):
            said = message(run.device, limit, evidence)
            reaches = _gradients_reach(item, run.device) if limit.capability == "autograd" else None
            if reaches:  # evidence of the item: the probe's is the device's
                excuses.refuse(report, "limit", said, reaches)
            else:
                excuses.excuse(item, report, call, "limit", said)
            break
    return report


def _gradients_reach(item: pytest.Item, device: str) -> str | None:
    """Where an op-list item's own call, outside autocast, gives its float32 inputs of the
    device gradients, on its inputs as made and cast by hand to the amp dtype alike:
    autograd reaches its tensors, whatever the probe met (a quirk of its own); that
    evidence, else None (a backend whose casts drop autograd shows it on the hand cast)."""
    from amp_conformance.checks.reproduction import callables

    case = (getattr(getattr(item, "callspec", None), "params", {}) or {}).get("amp_case")
    if case is None:
        return None
    call = callables(case)[0][1]
    for dtype in (None, case.amp_dtype):
        try:
            with torch.enable_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                args, kwargs = case.build_inputs()
                leaves = [t.requires_grad_() for t in tensors_in((args, kwargs)) if t.is_leaf
                          and t.dtype == torch.float32 and t.device.type == device]
                if dtype is not None:
                    args, kwargs = hand_cast(args, dtype, device), hand_cast(kwargs, dtype, device)
                floats = [o.float().sum() for o in tensors_in(call(*args, **kwargs))
                          if o.requires_grad]
                if not leaves or not floats:
                    return None
                sum(floats).backward()
        except Exception:  # noqa: BLE001 - the call or its backward fails: no evidence against
            return None
        if all(leaf.grad is None for leaf in leaves):
            return None
    return ("its own call outside autocast gives its float32 inputs gradients, on its inputs "
            "as made and cast by hand: autograd reaches its tensors, so the limit does not "
            "excuse its failure")
