"""A backend's limits named once, from a probe, instead of as the raw exceptions of the
items that meet them.

Some backends cannot do what whole checks stand on: autograd that does not reach their
tensors (their ops run without it), a layout they lack (sparse), modes that exist only in
the thread that entered them. A check that meets such a limit learns nothing of autocast,
and its item must not fail as if it had found a departure. Where a conformance item fails
and the vendor declared nothing about the capability, the limit's probe runs (once per
process, in the main thread, only after a failure: a conforming device pays nothing): a
few lines that need the capability and nothing else. If the probe fails too, the item is
a not-applicable skip naming the limit and the probe's evidence, when the item needs the
capability (its check's or its ``amp_needs`` marker) or failed with the probe's own error.
The report counts these skips per limit (``causes.limits``); a vendor who knows the limit
declares it (``--capabilities``: ``autograd = false``) and the items skip without running.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from amp_conformance.checks import registry
from amp_conformance.core.errors import describe_error, first_line, missing_kernel
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
            from amp_conformance.plugin.missing_kernels import refused_op  # after pytest's rewrite

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


LIMITS = (
    Limit("autograd", "autograd does not reach its tensors",
          "(x * x).sum().backward() on a leaf tensor x of the device, then through "
          "torch.nn.Linear(2, 2).to(device)", _autograd),
    Limit("sparse_grads", "it has no sparse layout",
          "torch.sparse_coo_tensor(...).to(device).coalesce()", _sparse),
    Limit("threads", "its ops do not run in other threads",
          "(x + x).cpu() in a new thread, x made in the main one", _threads),
)

#: (device, capability) -> the probe's exception, or None where the device has it
_SEEN: dict[tuple[str, str], BaseException | None] = {}


def _basics(device: str) -> None:
    """What every probe does before its capability: without it, no limit can be told."""
    (torch.ones(2, device=device) + 1).cpu()


def shown(limit: Limit, device: str) -> BaseException | None:
    """What the limit's probe raised on ``device`` (probed once per process), else None;
    None too where the device cannot even make and read back a tensor (no evidence of
    this limit rather than another)."""
    key = (device, limit.capability)
    if key not in _SEEN:
        _SEEN[key] = None
        with warnings.catch_warnings():  # the probe's warnings are nobody's item's
            warnings.simplefilter("ignore")
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


def _words(text: str) -> str:
    """A message without what differs per call: numbers, names in parentheses."""
    return re.sub(r"\s+", " ", re.sub(r"\([^)]*\)|\d+", "", first_line(text))).strip()


def _same_error(error: BaseException, said: str, evidence: BaseException) -> bool:
    words = _words(str(evidence))
    if len(words) < 12:  # too short to tell one error from another
        return False
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        if _words(str(error)) == words:
            return True
        error = error.__cause__ or error.__context__
    return words in _words(said.replace("\n", " "))


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
    if run.fake or run.device == "cpu":
        return report
    declared = declarations(item.config).capabilities.values
    wanted = needs(item)
    for limit in LIMITS:
        if limit.capability in declared:
            continue
        evidence = shown(limit, run.device)
        if evidence is None:
            continue
        if limit.capability in wanted or _same_error(call.excinfo.value, str(report.longrepr),
                                                     evidence):
            _path, line, _ = item.location
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (line or 0) + 1,
                               message(run.device, limit, evidence))
            break
    return report
