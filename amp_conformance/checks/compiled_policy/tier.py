"""The compiled tier's seam: ``--amp-compile BACKEND`` (alias ``--compile``), validated
against the backends torch.compile knows once the backend modules are imported (a vendor
may register one); each op-list case carries the backend and says it in its id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from amp_conformance.checks import compiling
from amp_conformance.checks.compiled_policy.per_entry import CHECK, CompiledCase
from amp_conformance.checks.tier import Run, Tier


class CompiledTier(Tier):
    check = CHECK
    options = {"--amp-compile": dict(
        dest="amp_compile", default=None, metavar="BACKEND",
        help="also run every op-list entry's policy check through torch.compile with this "
             "backend (eager, aot_eager, inductor, a vendor's) and compare with eager")}

    def resolve(self, config: Any, run: Run) -> Mapping[str, Any]:
        name = config.getoption("amp_compile")
        if name is None:
            return {"compile_backend": None}
        try:
            return {"compile_backend": compiling.validate(name)}
        except compiling.UnknownBackend as exc:
            raise pytest.UsageError(f"amp-conformance: {exc}") from None

    def enabled(self, settings: Any) -> bool:
        return settings.compile_backend is not None

    def case(self, case: Any, settings: Any) -> Any:
        return CompiledCase.of(case, settings.compile_backend)


TIER = CompiledTier()
