"""The operator surface's seam: ``--amp-opinfo`` and ``--amp-opinfo-samples``; op_db is
imported once, only when the tier is on (an xdist controller, which runs no OpInfo item,
only checks that it is installed and starts its workers sooner); one item per (amp dtype,
OpInfo), an OpInfo the tier cannot use on the device generated and skipped with why, so
the report accounts for every op of op_db; the report's operator-surface table."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

import pytest

from amp_conformance.checks import reference
from amp_conformance.checks.opinfo import report, source
from amp_conformance.checks.opinfo.check import CHECK, OpinfoCase
from amp_conformance.checks.tier import Run, Tier

FIXTURE = "opinfo_case"


class OpinfoTier(Tier):
    check = CHECK
    options = {
        "--amp-opinfo": dict(
            dest="amp_opinfo", action="store_true", default=False,
            help="also run every OpInfo of PyTorch's op_db (every sample form) under the "
                 "device's autocast against the declared policy; opt-in (no item without it; "
                 "needs expecttest)"),
        "--amp-opinfo-samples": dict(
            dest="amp_opinfo_samples", default=None, metavar="forms|all|N",
            help="which samples of each OpInfo and build dtype the --amp-opinfo tier judges: "
                 "forms (default: the fewest that show every argument form), all, or the "
                 "first N"),
    }

    def resolve(self, config: Any, run: Run) -> Mapping[str, Any]:
        raw = config.getoption("amp_opinfo_samples", default=None)
        on = bool(config.getoption("amp_opinfo", default=False))
        samples: int | str = source.DEFAULT_SAMPLES
        if raw is not None:
            if raw in ("forms", "all"):
                samples = raw
            elif raw.isdigit() and int(raw) > 0:
                samples = int(raw)
            else:
                raise pytest.UsageError(f"amp-conformance: --amp-opinfo-samples {raw!r}: "
                                        "expected 'forms', 'all' or a positive number of samples")
            if not on:
                raise pytest.UsageError("amp-conformance: --amp-opinfo-samples needs --amp-opinfo")
        if on:
            try:
                source.check_installed() if run.controller else source.op_db()
            except source.OpDbUnavailable as exc:
                raise pytest.UsageError(f"amp-conformance: {exc}") from None
        return {"opinfo": on, "opinfo_samples": samples}

    def enabled(self, settings: Any) -> bool:
        return bool(settings.opinfo)

    def summary(self, results: list[dict[str, Any]]) -> Mapping[str, Any]:
        surface = report.operator_surface(results)
        return {"operator_surface": surface} if surface else {}

    def html(self, data: dict[str, Any]) -> str:
        return report.html(data.get("operator_surface"), lambda v: escape(str(v)))

    def markdown(self, data: dict[str, Any]) -> list[str]:
        return report.markdown(data.get("operator_surface"))

    def release(self) -> None:
        reference.release()  # the reference kernels' registrations end with the run


def params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (amp dtype, OpInfo), the unusable ones marked skip with why."""
    found = []
    for dtype in settings.amp_dtypes:
        for ref in source.refs():
            case = OpinfoCase(settings.target, dtype, ref, settings.numerics,
                              settings.opinfo_samples, settings.oplists)
            reason = source.unusable(ref.lookup(), settings.device)
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            found.append(pytest.param(case, id=case.id, marks=marks))
    return found


TIER = OpinfoTier()
PARAMS = {(FIXTURE,): params}
