"""The module tier's seam: ``--amp-modules`` runs the inputs of every ModuleInfo of
PyTorch's ``module_db`` (the first ``--amp-modules-inputs`` for train and for eval; imported
once, only when the tier is on: it needs ``expecttest``; an xdist controller only checks
that it is installed); the default suite's modules (``oplists/modules.toml``) run without
it. One item per (amp dtype, ModuleInfo)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from amp_conformance.checks.modules import source
from amp_conformance.checks.modules.check import ModuleCase
from amp_conformance.checks.tier import Run, Tier
from amp_conformance.schema.modules import builtin

CHECK = "modules_db"
FIXTURES = ("module_case",)
DB_FIXTURES = ("module_db_case",)


class ModulesTier(Tier):
    check = CHECK
    options = {
        "--amp-modules": dict(
            dest="amp_modules", action="store_true", default=False,
            help="also run every ModuleInfo of PyTorch's module_db (its first inputs for "
                 "train and eval), with grad, under no_grad and inference_mode, under the "
                 "device's autocast against the declared policy; opt-in (needs expecttest)"),
        "--amp-modules-inputs": dict(
            dest="amp_modules_inputs", default=None, metavar="N|all",
            help="how many of each ModuleInfo's inputs the --amp-modules tier judges, for "
                 f"train and for eval: the first N (default {source.DEFAULT_INPUTS}) or all"),
    }

    def resolve(self, config: Any, run: Run) -> Mapping[str, Any]:
        on = bool(config.getoption("amp_modules", default=False))
        raw = config.getoption("amp_modules_inputs", default=None)
        inputs: int | None = source.DEFAULT_INPUTS
        if raw is not None:
            if raw == "all":
                inputs = None
            elif raw.isdigit() and int(raw) > 0:
                inputs = int(raw)
            else:
                raise pytest.UsageError(f"amp-conformance: --amp-modules-inputs {raw!r}: "
                                        "expected 'all' or a positive number of inputs")
            if not on:
                raise pytest.UsageError("amp-conformance: --amp-modules-inputs needs "
                                        "--amp-modules")
        if on:
            try:
                source.check_installed() if run.controller else source.module_db()
            except source.ModuleDbUnavailable as exc:
                raise pytest.UsageError(f"amp-conformance: {exc}") from None
        return {"modules_db": on, "modules_inputs": inputs}

    def enabled(self, settings: Any) -> bool:
        return bool(settings.extra.get("modules_db"))


def params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (amp dtype, entry of oplists/modules.toml)."""
    found = []
    for dtype in settings.amp_dtypes:
        for entry in builtin():
            subject = source.Subject(entry.id, entry.module, entry.exercises, entry=entry)
            case = ModuleCase(settings.target, dtype, subject, numerics=settings.numerics,
                              oplists=settings.oplists)
            reason = subject.unusable()
            found.append(pytest.param(case, id=case.id,
                                      marks=[pytest.mark.skip(reason=reason)] if reason else []))
    return found


def db_params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (amp dtype, ModuleInfo): its every input judged in one item."""
    if not TIER.enabled(settings):
        return []
    found = []
    for dtype in settings.amp_dtypes:
        for name in source.module_db():
            case = ModuleCase(settings.target, dtype, info=name, numerics=settings.numerics,
                              oplists=settings.oplists,
                              inputs=settings.extra.get("modules_inputs", source.DEFAULT_INPUTS))
            found.append(pytest.param(case, id=case.id))
    return found


TIER = ModulesTier()
PARAMS = {FIXTURES: params, DB_FIXTURES: db_params}
