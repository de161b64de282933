"""One item of the family: a module, in every mode, under one autocast dtype.

The item fails naming every mode that departs (what path it took inside autocast, what
the control cast, how they differ) and prints a reproduction that runs as pasted; a mode
that meets a recorded PyTorch defect passes as reproduced, recorded on the item; an item
none of whose modes could be judged is not applicable, saying why. The summary (modes by
outcome, the fused paths taken, the output dtypes of eval without grad) travels as the user
property ``amp_module``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks import defects
from amp_conformance.checks.modules import judge, source
from amp_conformance.checks.modules.source import Subject
from amp_conformance.checks.reference import policy_table
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.target import Target

PROPERTY = "amp_module"


@dataclass(frozen=True)
class ModuleCase:
    """One item: an entry of modules.toml (``subject``), or every input of a ModuleInfo
    of module_db (``info``), on the device under one autocast dtype."""

    target: Target
    amp_dtype: torch.dtype
    subject: Subject | None = None
    info: str | None = None
    numerics: str = "bitwise"
    oplists: tuple[str, ...] = ()
    #: module_db's inputs judged per train and eval (None: all of them)
    inputs: int | None = source.DEFAULT_INPUTS

    @property
    def name(self) -> str:
        return self.subject.id if self.subject is not None else self.info.removeprefix("nn.")

    @property
    def id(self) -> str:
        return f"{self.target.device}-{devices.dtype_name(self.amp_dtype)}-{self.name}"

    def subjects(self) -> list[Subject]:
        if self.subject is not None:
            return [self.subject]
        return source.db_subjects(self.info, self.inputs)


Judged = tuple[Subject, judge.Verdict]


def verdicts(case: ModuleCase) -> list[Judged]:
    """Every mode of every subject of the case, judged."""
    found = []
    table = policy_table(case.target, case.amp_dtype, case.oplists)
    for subject in case.subjects():
        reason = subject.unusable()
        if reason:
            raise NotApplicable(reason)
        setting = judge.Setting(subject, case.target, case.amp_dtype, table, case.numerics)
        with case.target.tensors():
            found += [(subject, judge.judge(setting, mode)) for mode in judge.MODES]
    return found


def summarize(case: ModuleCase, found: list[Judged]) -> dict[str, Any]:
    """What the report keeps of an item."""
    first = found[0][0] if found else None
    return {"module": first.name if first else case.name, "id": case.name,
            "outcomes": dict(Counter(v.outcome for _, v in found)),
            "paths": sorted({p for _, v in found for p in v.paths}),
            "defects": sorted({v.defect for _, v in found if v.defect}),
            "dtypes": {f"{s.id} {v.mode.label}": list(v.dtypes) for s, v in found}}


def reproduction(case: ModuleCase, subject: Subject, mode: judge.Mode) -> str:
    dev, dtype = case.target.device, case.amp_dtype
    grad = {"grad": "torch.enable_grad()", "no_grad": "torch.no_grad()",
            "inference_mode": "torch.inference_mode()"}[mode.grad]
    lines = ["import torch", *subject.reproduction(dev, dtype),
             f"module.train({mode.training})",
             f"with {grad}, torch.autocast({dev!r}, dtype={dtype}):",
             "    out = module(*args, **kwargs)",
             "print([getattr(t, 'dtype', t) for t in (out if isinstance(out, (tuple, list)) else [out])])"]
    if case.target.fake:
        lines.insert(0, "# fake: run inside torch._subclasses.fake_tensor.FakeTensorMode("
                        "allow_non_fake_inputs=True), switching the autocast state on with "
                        "torch.set_autocast_enabled/set_autocast_dtype")
    return "\n".join("    " + line for line in lines)


def check(case: ModuleCase, record: Callable[[str, Any], None]) -> None:
    """Judge every mode; fail naming each departing one, skip when none applies."""
    found = verdicts(case)
    summary = summarize(case, found)
    record(PROPERTY, summary)
    if summary["defects"]:
        record(defects.PROPERTY, defects.record_of(summary["defects"][0], defects.REPRODUCED))
    for subject, v in found:
        if v.outcome in (judge.DEFECT, judge.CAPABILITY, judge.NOT_APPLICABLE):
            print(f"{subject.id} {v.mode.label}: {v.outcome}: {v.detail}")
    failed = [(s, v) for s, v in found if v.outcome == judge.FAILED]
    where = (f"torch.nn.{found[0][0].name} [{case.name}] on {case.target}, autocast dtype "
             f"{case.amp_dtype}" if found else case.name)
    if failed:
        lines = [f"{where}: {len(failed)} of {len(found)} modes depart from the module's "
                 "computation cast as the device's op lists say"]
        lines += [f"  {s.id} ({s.exercises}) {v.mode.label}: {v.detail}" for s, v in failed]
        lines += ["Reproduce the first:", reproduction(case, failed[0][0], failed[0][1].mode)]
        raise ConformanceFailure("\n".join(lines))
    if all(v.outcome == judge.NOT_APPLICABLE for _, v in found):
        raise NotApplicable(f"not applicable: {where} fails outside autocast too in every "
                            f"mode ({found[0][1].detail if found else 'no input'})")
