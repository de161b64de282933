"""The verdict of a per-entry check on an entry that meets one of PyTorch's own defects.

The entry's ``expect`` is the intended contract; its ``reference_defect`` says what
PyTorch does today (:mod:`amp_conformance.schema.defects`). The check runs against the
contract first. Where that fails and the defect is still in the running torch, the same
check runs against today's behaviour: a device matching it *reproduces* the defect and
passes; one matching the contract *fixes* it. Either way the item records which (user
property ``amp_defect``), and the report lists them per device. A device matching
neither fails with both accounts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from amp_conformance.checks.case import Case
from amp_conformance.checks.fake_casts import FakeTierLimit
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.schema.defects import DefectUse, registry
from amp_conformance.schema.oplist import variants

#: the user property an item's defect verdict travels in (to the report, across xdist)
PROPERTY = "amp_defect"
REPRODUCED, FIXED = "reproduced", "fixed"

Record = Callable[[str, Any], None]


def active(case: Case) -> DefectUse | None:
    """The entry's reference defect where the running torch still has it, else None."""
    use = case.entry.reference_defect
    return use if use is not None and use.defect.applies() else None


def verdict(case: Case, check: Callable[[Case], None], record: Record) -> None:
    """Run ``check`` on ``case``; with an active reference defect, accept either behaviour
    and record which one the device showed."""
    use = active(case)
    if use is None:
        check(case)
        return
    try:
        check(case)
    except FakeTierLimit:
        raise
    except Exception as intended:  # noqa: BLE001 - any departure from the contract
        try:
            reproduces(case, check, use)
        except Exception as today:  # noqa: BLE001
            raise ConformanceFailure(
                f"{intended}\n\nNor does it match PyTorch's behaviour today, reference defect "
                f"{use.defect.cite()}: {first_line(today)}") from None
        record(PROPERTY, _record(use, REPRODUCED))
    else:
        record(PROPERTY, _record(use, FIXED))


def _record(use: DefectUse, status: str) -> dict[str, Any]:
    return record_of(use.id, status)


def record_of(defect_id: str, status: str) -> dict[str, Any]:
    """The ``PROPERTY`` value of an item that met ``defect_id`` (``REPRODUCED``/``FIXED``),
    also for checks that judge a defect themselves (the compiled tier)."""
    d = registry()[defect_id]
    return {"id": d.id, "status": status, "links": list(d.links), "summary": d.summary}


def reproduces(case: Case, check: Callable[[Case], None], use: DefectUse) -> None:
    """Raise unless the device does what PyTorch does today for this entry."""
    if use.expect == "error":
        _raises_inside(case, use)
        return
    # without an Autocast kernel PyTorch's call is what builtin promotion makes of it: the
    # kernel-entry requirement does not hold for today's behaviour
    policy = case.entry.policy if use.kernel else "builtin_promote"
    check(replace(case, entry=replace(case.entry, expect=use.expect, cast=use.cast,
                                      policy=policy, reference_defect=None)))


def _raises_inside(case: Case, use: DefectUse) -> None:
    """Today PyTorch raises inside autocast for these inputs: every variant must."""
    with case.target.tensors():
        args, kwargs = case.build_inputs()
        for name, fn in variants(case.entry):
            with case.target.autocast(case.amp_dtype):
                try:
                    fn(*args, **kwargs)
                except (RuntimeError, NotImplementedError) as exc:
                    if re.match(re.escape(use.error or ""), str(exc)):
                        continue
                    raise ConformanceFailure(f"{name} raised {first_line(exc)!r}, PyTorch "
                                             f"raises {use.error!r}") from None
            raise ConformanceFailure(f"{name} ran inside autocast; PyTorch raises "
                                     f"{use.error!r}")


def known_departure(defect_id: str, run: Callable[[], None], symptom: str,
                    record: Record) -> None:
    """For a check that is not an op-list entry: run it; a failure whose message carries
    ``symptom`` is the recorded defect ``defect_id`` while the running torch has it
    (reproduced, passes); a pass while it has it fixes it. Any other failure stands."""
    defect = registry()[defect_id]
    if not defect.applies():
        run()
        return
    try:
        run()
    except ConformanceFailure as exc:
        if symptom not in str(exc):
            raise
        record(PROPERTY, record_of(defect_id, REPRODUCED))
    else:
        record(PROPERTY, record_of(defect_id, FIXED))
