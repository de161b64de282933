"""The policy properties' items: one per (policy, op) the run's op lists and forms can call."""

from __future__ import annotations

from typing import Any

import pytest

#: the argument names a test asks for to get one item per (policy, op)
FIXTURES = ("policy", "op")


def policy_op_params(metafunc: Any, settings: Any) -> list[Any]:
    """One param per (policy, op) that is a candidate of the policy under any of the run's
    amp dtypes, sorted (the ids are the same on every run and pytest-xdist worker); a
    policy without any keeps one skipped item saying so. The ops are those the run's forms
    can call (``Settings.forms``: FORMS and the vendor's property-forms hooks). The property
    module imports Hypothesis: not where the plugin loads (an xdist controller never pays
    for it), only where its items are collected."""
    from amp_conformance.checks.policy import property as policy_properties

    found = []
    for policy in policy_properties.POLICIES:
        ops = sorted({c.op for dtype in settings.amp_dtypes for c in policy_properties.candidates(
            settings.target, dtype, policy, settings.oplists, settings.numerics, None,
            settings.forms)})
        found += [pytest.param(policy, op, id=f"{policy}-{op}") for op in ops]
        if not ops:
            found.append(pytest.param(policy, None, id=policy, marks=pytest.mark.skip(
                reason=f"not applicable: no op of the {policy} policy in the {settings.device} "
                       "op lists that the property knows how to call (call_forms.FORMS and "
                       "the pytest_amp_conformance_property_forms hooks)")))
    return found
