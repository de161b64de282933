"""One item of the tier: every sample form of one OpInfo under one autocast dtype.

Grouped per op (one item per device, amp dtype and OpInfo: ``test_opinfo[cpu-bfloat16-
addmm]``) for speed; a failure names every failing sample form and prints the first one's
reproduction, which runs as pasted. The item's summary (what the op is under autocast, its
forms by outcome, the overloads it entered) travels to the report's operator-surface table
and to the atlas as the user property ``amp_opinfo``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks import defects
from amp_conformance.checks.opinfo import calls, judge, source
from amp_conformance.checks.reference import policy_table
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.schema import departures

CHECK = "opinfo"
PROPERTY = "amp_opinfo"


class NotApplicable(Exception):
    """No sample form of the op could be judged here (the item is skipped with why)."""


@dataclass(frozen=True)
class OpinfoCase:
    """One item: an OpInfo on the device under one autocast dtype."""

    target: Target
    amp_dtype: torch.dtype
    ref: source.OpRef
    numerics: str = "bitwise"
    #: which samples per build dtype: "forms" (every argument form), "all", or the first N
    samples: int | str = source.DEFAULT_SAMPLES
    oplists: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.target.device}-{devices.dtype_name(self.amp_dtype)}-{self.ref.id}"


def summarize(case: OpinfoCase, verdicts: list[judge.Verdict],
              drawn: dict[str, int] | None = None) -> dict[str, Any]:
    """What the report and the atlas keep of an item (``drawn``: calls.counts)."""
    kinds = {v.kind for v in verdicts if v.kind is not None and v.outcome != judge.NOT_APPLICABLE}
    kind = next((k for k in judge.KINDS if k in kinds), None)
    first = next((v for v in verdicts if v.form == calls.Form(v.form.index, torch.float32)),
                 None)
    return {
        "op": case.ref.id, "kind": kind,
        "outcomes": dict(Counter(v.outcome for v in verdicts)),
        "entered": sorted({name for v in verdicts for name in v.entered}),
        "defects": sorted({v.defect for v in verdicts if v.defect}),
        **(drawn or {}),
        "first": None if first is None else {"outcome": first.outcome, "kind": first.kind,
                                             "dtypes": list(first.dtypes), "detail": first.detail},
    }


def verdicts_of(case: OpinfoCase, first_only: bool = False
                ) -> tuple[list[judge.Verdict], dict[str, int]]:
    """Every call of the case, judged (inside the target's tensor context), and what was
    drawn (calls.counts); with ``first_only``, the first float32 call alone (the atlas)."""
    op = case.ref.lookup()
    reason = source.unusable(op, case.target.device)
    if reason:
        raise NotApplicable(reason)
    setting = judge.Setting(case.ref, op, case.target, case.amp_dtype, case.numerics,
                            policy_table(case.target, case.amp_dtype, case.oplists),
                            departures.departures_of(case.ref.name, case.ref.variant),
                            incomparable=departures.incomparable(case.ref.name, case.ref.variant))
    found = []
    with _quiet_fake_tensors():
        # drawn outside the fake device's tensors: a sample maker may read values (addcdiv's
        # keeps its divisor from zero), which fake tensors have none of
        drawn = calls.draw(op, case.target.device, case.target.fake, case.amp_dtype,
                           1 if first_only else case.samples)
    with _quiet_fake_tensors(), case.target.tensors():
        for form, call in calls.calls(op, case.target.device, case.target.fake, drawn):
            if first_only and form != calls.Form(0, torch.float32):
                break
            if isinstance(call, Exception):
                found.append(judge.Verdict(form, judge.NOT_APPLICABLE,
                                           detail=f"cannot build it here: {call}"))
            else:
                found.append(judge.judge(setting, form, call))
    return found, calls.counts(drawn)


def check(case: OpinfoCase, record: Callable[[str, Any], None]) -> None:
    """Judge every sample form; fail naming each failing one, skip when none applies."""
    found, drawn = verdicts_of(case)
    summary = summarize(case, found, drawn)
    record(PROPERTY, summary)
    if summary["defects"]:  # the report's reference-defects section lists the item
        record(defects.PROPERTY, defects.record_of(summary["defects"][0], defects.REPRODUCED))
    failed = [v for v in found if v.outcome == judge.FAILED]
    if failed:
        first = failed[0]
        lines = [f"OpInfo {case.ref.id} on {case.target}, {devices.dtype_name(case.amp_dtype)} "
                 f"autocast: {len(failed)} of {len(found)} sample forms depart from the declared "
                 "policy"]
        lines += [f"  {v.form.label} ({v.kind}): {v.detail}" for v in failed]
        lines += ["Reproduce the first:",
                  calls.reproduction(case.ref, first.form, case.target.device, case.target.fake,
                                      case.amp_dtype)]
        raise ConformanceFailure("\n".join(lines))
    if all(v.outcome == judge.NOT_APPLICABLE for v in found):
        why = found[0].detail if found else "OpInfo gives no sample"
        raise NotApplicable(f"not applicable: no sample form of {case.ref.id} runs here "
                            f"({len(found)} tried; the first {why})")


class _quiet_fake_tensors:
    """FakeTensorMode logs every meta kernel that raises at ERROR level; the tier judges
    those errors itself, so the log is held back while it runs (and restored)."""

    def __enter__(self) -> None:
        self.logger = logging.getLogger("torch._subclasses.fake_tensor")
        self.level = self.logger.level
        self.logger.setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)
