"""Every op-list entry whose policy casts can fail: its policy check tells the policy from an
autocast kernel that does nothing.

An entry whose inputs already have the dtype its policy produces (a float32 input to a
float32-policy op, mixed inputs that builtin type promotion widens anyway) passes the policy
check whatever the kernel does: it checks nothing. For each entry of a policy that casts
(lower precision, float32, float32-unless-dtype, promote; not builtin promotion, whose
point is that autocast does nothing, nor banned, which raises) this test observes which
``Autocast<Device>`` kernels the entry's call enters (coverage's observer), checks the
entry against the real kernels, then replaces each of them by a pass-through (the
selftest's ``keep_dtype``: redispatch without casting) and checks again: it must fail.

Entries that state that autocast changes nothing for their call are left out:
``cast = "none"`` (an explicit ``dtype``, respected). Entries whose checks cannot tell the
policy from a pass-through for every input the op takes say why in their ``passthrough``
field; the test requires the field of exactly the entries that pass, so a field that no
longer holds fails too. cuda runs through FakeTensorMode (dtypes only, cheap), cpu on the
device, each under every autocast dtype the entry applies to.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import pytest
import torch

from amp_conformance.checks import defects
from amp_conformance.checks.case import Case
from amp_conformance.checks.coverage import check as coverage
from amp_conformance.checks.mutation import override_kernel
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.core import devices
from amp_conformance.core.dispatch import release_shared, shared_observer
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.plugin.parametrize import not_applicable
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import Entry

#: the policies whose whole point is a cast
CASTING = ("lower", "fp32", "fp32_opt_dtype", "promote")
#: seconds one device may take (the whole test stays well under a minute on 2 cores)
BUDGET = 40.0


@pytest.fixture(autouse=True)
def _fresh_observers():
    """The policy check's shared dispatch observers are per device and register kernels
    for the same overloads: drop them after each test so devices do not mix."""
    release_shared()
    yield
    release_shared()


def _passes(case: Case) -> bool:
    """The policy verdict as the suite gives it (a reference defect's behaviour passes too)."""
    try:
        defects.verdict(case, check_policy, lambda key, value: None)
    except ConformanceFailure:
        return False
    return True


def _with_passthrough(case: Case, overloads: tuple[str, ...], check: Callable[[Case], bool]) -> bool:
    """``check(case)`` with every entered Autocast kernel replaced by a pass-through."""
    key = devices.dispatch_key(case.target.device)
    undos = []
    try:
        for name in overloads:
            undos.append(override_kernel(name.removeprefix("aten::"), key, lambda redispatch: redispatch))
        return check(case)
    finally:
        for undo in reversed(undos):
            undo()


def _verdict(entry: Entry, target: Target) -> str | None:
    """A problem with ``entry`` on ``target``, or None: it fails under a pass-through (or
    says why it cannot, and indeed cannot)."""
    cases = [Case(target, d, entry) for d in devices.supported_amp_dtypes(target.device, target.fake)]
    cases = [c for c in cases if not_applicable("policy", c) is None]
    vacuous = []
    for case in cases:
        reach = coverage.observe(entry, target, case.amp_dtype, shared_observer(target.device))
        foreign = [n for n in reach.overloads if not n.startswith("aten::")]
        with warnings.catch_warnings():  # the suite's own runs ignore them too
            warnings.simplefilter("ignore")
            if foreign or not _passes(case):
                return f"{entry.id}: not a clean baseline ({foreign or 'policy fails unmutated'})"
            if _with_passthrough(case, reach.overloads, _passes):
                vacuous.append(devices.dtype_name(case.amp_dtype))
    if vacuous and entry.passthrough is None:
        return (f"{entry.id} ({entry.category}, {entry.path}): its policy check passes with the "
                f"autocast kernel replaced by a pass-through under {', '.join(vacuous)}: give it "
                "inputs whose dtype the policy changes, or say why none can in `passthrough`")
    if cases and not vacuous and entry.passthrough is not None:
        return (f"{entry.id} ({entry.path}): says a pass-through cannot fail it (`passthrough`), "
                "but its policy check does fail under one: drop the field")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("device, fake", [("cuda", True), ("cpu", False)], ids=["cuda-fake", "cpu"])
def test_every_casting_entry_fails_under_a_passthrough_kernel(device, fake):
    target = Target(device, fake)
    entries = [e for e in oplist.load(device).entries
               if e.policy in CASTING and e.cast != "none" and e.version_gap() is None]
    assert len(entries) > 100, "the lists of a device hold well over 100 casting entries"
    started = time.perf_counter()
    problems = [p for p in (_verdict(e, target) for e in entries) if p]
    assert not problems, "\n".join(problems)
    assert time.perf_counter() - started < BUDGET, "the vacuity scan got slow: sample it"


def test_a_vacuous_entry_is_flagged():
    """The test's own control: a float32-policy entry fed float32 inputs checks nothing."""
    lists = oplist.load("cuda")
    entry = next(e for e in lists.entries if e.id == "nll_loss")
    spec = oplist.parse_entry(
        {"id": "nll_loss-fp32-input", "op": "nll_loss", "category": "nn_fp32",
         "args": [{"shape": [8, 8], "fill": "uniform"},
                  {"shape": [8], "dtype": "int64", "fill": "zeros"}]},
        entry.path, 0, "cuda")
    problem = _verdict(spec, Target("cuda", fake=True))
    assert problem is not None and "passes with the autocast kernel replaced" in problem, problem
    assert _verdict(entry, Target("cuda", fake=True)) is None
    assert torch.is_autocast_enabled("cuda") is False
