"""An excuse is a claim, proved here before any item is spared a failure.

Some failures are not autocast's: a backend's limit (autograd that does not reach its
tensors), a kernel it lacks that a check needs as a tool, an op's own departure under a
``torch.func`` transform. The suite names those instead of failing on them, but a wrong
autocast must never buy a green run by looking like one. So a failed item is excused only
when its own failure is shown not to be autocast's: run again with the device's autocast
disabled (every region it enters on the device stays off, so no Autocast kernel of the
device runs), or, for an op-list item, its entry's own call made outside autocast on its
inputs as made and cast by hand to the amp dtype, it fails **the same way**: the same
exception class, the same op, the same first line. Where it does not (it runs, or fails
otherwise), the failure is autocast's whatever words it used and whatever op it names,
and the item keeps it, saying why the excuse was refused.

Every excuse granted is recorded on the item (the user property ``amp_excuse``: its
mechanism and evidence), counted per mechanism by the verdict line and every report;
``--amp-no-excuses`` turns each into a failure for a vendor who wants none.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from amp_conformance.core import sync
from amp_conformance.core.casting import hand_cast, settle
from amp_conformance.core.errors import first_line, headline, same_way, signature
from amp_conformance.core.state import ItemState
from amp_conformance.plugin.items import EXCUSE_PROPERTY, START_STATE
from amp_conformance.plugin.session_settings import settings

_PROOF = pytest.StashKey["Proof"]()
#: what draining the device after the item's failure found: its errors, and whether clean
_DRAINED = pytest.StashKey[tuple]()


@dataclass(frozen=True)
class Proof:
    """Whether an item's failure was shown independent of autocast, and what showed it or
    what refuted it."""

    shown: bool
    evidence: str


@contextlib.contextmanager
def autocast_disabled(device: str) -> Iterator[None]:
    """Every ``torch.set_autocast_enabled`` of ``device`` (the regions' ``__enter__``, a
    fake device's direct switch) sets it off while inside."""
    real = torch.set_autocast_enabled

    def set_enabled(*args: Any) -> None:
        if len(args) == 2 and str(args[0]).split(":")[0] == device:
            args = (args[0], False)
        elif len(args) == 1 and device == "cuda":  # the device-less form is CUDA's
            args = (False,)
        real(*args)
    torch.set_autocast_enabled = set_enabled
    try:
        yield
    finally:
        torch.set_autocast_enabled = real


def _raised(thunk: Callable[[], Any]) -> BaseException | None:
    try:
        thunk()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - pytest's outcomes (skip, fail) too
        return exc
    return None


def _rerun(item: pytest.Item, device: str) -> BaseException | None:
    """What the item raises run again with the device's autocast disabled (None: it
    passes), its warnings nobody's (call inside :func:`clean_start`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with autocast_disabled(device):
            return _raised(item.runtest)


class DirtyDevice(Exception):
    """The device does not come back clean: no proof can run on it."""


@contextlib.contextmanager
def clean_start(item: pytest.Item, device: str) -> Iterator[None]:
    """Inside: the device synchronized (its pending errors drained) and the state the item
    started from put back, so a proof runs as the item ran, never in what its failure left
    (a device in an error state, a leaked grad mode); after: the state as the failure left
    it, for the isolation to name. DirtyDevice where the device reported an error (the
    item's), keeps failing, or fails after the proof's own calls."""
    left = ItemState.capture(device)
    if _DRAINED not in item.stash:  # once per item: a second proof finds it drained
        item.stash[_DRAINED] = sync.recover(device)
    errors, clean = item.stash[_DRAINED]
    if not clean:
        raise DirtyDevice(f"{device} still reports an error after {len(errors)} synchronizes "
                          f"({_said(errors[-1])}): no proof can run on it")
    if errors:  # the item's own: its run left the device failing
        raise DirtyDevice(f"{device} reported an error after the item failed ({_said(errors[0])}"
                          "): an item that leaves its device failing is never excused")
    start = item.stash.get(START_STATE, None)
    if start is not None:
        start.restore()
    try:
        yield
    finally:
        late = sync.pending(device)  # what the proof's own calls left is the proof's
        left.restore()
        if late is not None:
            raise DirtyDevice(f"{device} reported an error after the proof's calls "
                              f"({_said(late)})")


def _entry_calls(case: Any, device: str) -> Iterator[tuple[str, Callable[[], Any]]]:
    """An op-list entry's own call outside autocast: on its inputs as made, and on them
    cast by hand to the amp dtype."""
    from amp_conformance.checks.reproduction import callables

    call = callables(case)[0][1]
    args, kwargs = case.build_inputs()
    yield "as made", lambda: settle(call(*args, **kwargs))
    yield (f"cast by hand to {str(case.amp_dtype).removeprefix('torch.')}",
           lambda: settle(call(*hand_cast(args, case.amp_dtype, device),
                               **hand_cast(kwargs, case.amp_dtype, device))))


def proof(item: pytest.Item, call: pytest.CallInfo) -> Proof:
    """Whether the item's failure is shown not to be autocast's (once per item)."""
    if _PROOF in item.stash:
        return item.stash[_PROOF]
    if call.when != "call" or call.excinfo is None:
        return Proof(False, f"it failed in its {call.when}, which cannot be run again alone")
    error, device = call.excinfo.value, settings(item.config).device
    try:
        with clean_start(item, device):
            found = _proved(item, device, error)
    except DirtyDevice as exc:
        found = Proof(False, str(exc))
    item.stash[_PROOF] = found
    return found


def _proved(item: pytest.Item, device: str, error: BaseException) -> Proof:
    case = (getattr(getattr(item, "callspec", None), "params", {}) or {}).get("amp_case")
    found = None
    if case is not None:
        try:
            calls = list(_entry_calls(case, device))
        except Exception:  # noqa: BLE001 - no call to make: the rerun alone tells
            calls = []
        for how, thunk in calls:
            again = _raised(thunk)
            if again is not None and same_way(error, again):
                found = Proof(True, f"its entry's own call outside autocast, on its inputs "
                                    f"{how}, raises the same: {_said(again)}")
                break
    if found is None:
        again = _rerun(item, device)
        if again is not None and signature(again) == signature(error):
            found = Proof(True, f"run again with autocast disabled on {device}, it fails the "
                                f"same way: {_said(again)}")
        elif again is None:
            found = Proof(False, f"run again with autocast disabled on {device}, it passes: "
                                 "the failure is autocast's")
        else:
            found = Proof(False, f"run again with autocast disabled on {device}, it fails "
                                 f"otherwise ({_said(again)}): nothing shows "
                                 "the failure is not autocast's")
    return found


def _said(error: BaseException) -> str:
    """``Type: the telling line`` (the next one where the first only introduces it)."""
    return first_line(headline(f"{type(error).__name__}: {error}"), 200)


def excuse(item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo,
           mechanism: str, reason: str) -> bool:
    """Skip the failed item as ``reason`` where its failure is proved not autocast's
    (recorded, counted); else keep the failure, saying why the excuse was refused. Whether
    it was excused."""
    shown = proof(item, call)
    if not shown.shown:
        refuse(report, mechanism, reason, shown.evidence)
        return False
    if item.config.getoption("amp_no_excuses", False):
        report.longrepr = (f"excuse refused by --amp-no-excuses ({mechanism}): {reason}; "
                           f"proved: {shown.evidence}\n{report.longrepr}")
        return False
    record(report, mechanism, shown.evidence)
    _path, line, _ = item.location
    report.outcome = "skipped"
    report.longrepr = (str(item.path), (line or 0) + 1, f"{reason}; proved: {shown.evidence}")
    return True


def refuse(report: pytest.TestReport, mechanism: str, reason: str, evidence: str) -> None:
    """Keep the failure, saying which excuse was refused and what refuted it."""
    said = first_line(reason).removeprefix("not applicable: ")
    report.longrepr = f"not excused ({mechanism}): {said}; {evidence}\n{report.longrepr}"


def record(report: Any, mechanism: str, evidence: str | list[str]) -> None:
    """Put the excuse on the item's report, where every report reads it."""
    report.user_properties.append((EXCUSE_PROPERTY, {"mechanism": mechanism,
                                                     "evidence": evidence}))
