"""The compiled tier (opt-in, ``--amp-compile BACKEND``): every op-list entry's policy
check compiled with the backend agrees with eager in dtype and value (``per_entry``), or does
what a recorded reference defect says PyTorch's compiled call does today
(``departures``)."""

from amp_conformance.checks.compiled_policy.per_entry import not_applicable
from amp_conformance.core.registry import Check

CHECKS = (
    Check("compiled_policy", "opt-in (--amp-compile BACKEND): each entry's policy check compiled "
          "agrees with eager in dtype and value", per_entry=True, capability="compile",
          not_applicable=not_applicable, opt_in="--amp-compile"),
)

from amp_conformance.checks.compiled_policy.tier import TIER  # noqa: E402,F401
