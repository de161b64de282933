"""Property-based conformance (Hypothesis): the autocast region stack (the regions
family's state machine) and the eligibility rule of the cast policies over generated
shapes, dtypes, devices and values (the policy family's property).

One item per part, so an expected-failures line covers one part only: the policy
properties run one item per (policy, op) of the device's op lists
(``test_policy_casts_only_eligible_inputs[cpu-bfloat16-lower-mm]``), the region state
machine one item per rule (the base rules enter_region and exit_region plus that rule,
``test_regions_stack[cpu-fresh_thread]``), one for the base rules alone
(``[cpu-enter_region-exit_region]``) and one with every rule together
(``[cpu-all_rules]``), which leaves out the rules whose own item is listed as an
expected failure and says which.

How many examples run is the profile's choice: ``--amp-hypothesis-profile ci`` (default:
derandomized and quick), ``dev`` or ``nightly``; an item of one part runs fewer
(``profiles.selected_part``). A failure prints the shrunk example and equivalent Python
code that reproduces it. ``--hypothesis-show-statistics`` prints what each item's
examples exercised (``amp_conformance.checks.statistics``).
"""

from __future__ import annotations

import pytest

from amp_conformance.checks import profiles
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.checks.regions import machine as regions
from amp_conformance.core import devices
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.plugin import vendor

#: the id of the item that runs every rule of the region machine together
ALL_RULES = "all_rules"
#: the id of the item of the base rules alone (every other item runs them too)
BASE = "-".join(regions.BASE_RULES)
RULE_ITEMS = {BASE: regions.BASE_RULES,
              **{r: (*regions.BASE_RULES, r) for r in regions.RULES if r not in regions.BASE_RULES},
              ALL_RULES: regions.RULES}
#: the user property (JUnit XML, the report) that lists the rules all_rules left out
LEFT_OUT_PROPERTY = "amp_left_out_rules"


# -- the region stack ------------------------------------------------------------------


@pytest.mark.amp_check("regions")
@pytest.mark.parametrize("rule", list(RULE_ITEMS))
def test_regions_stack(request, amp_target, amp_device, rule):
    """Entering, leaving, decorating, raising, disabling, threads: after every step the
    autocast state and a probe op agree with a model of the open regions as a stack."""
    rules = RULE_ITEMS[rule]
    settings = profiles.selected_part()
    if rule == ALL_RULES:
        settings = profiles.selected()
        rules = _all_rules_but_expected_failures(request, amp_device)
    with unchanged_autocast_state(amp_target.device, "the regions state machine"):
        regions.run_regions_machine(amp_target, settings, rules=rules)


def expected_failures_of_rules(node: pytest.Item, device: str) -> dict[str, str]:
    """The rule items that the run's expected-failures files list, for the all_rules
    item ``node``: the item's rule id -> the line's reason. A line that lists all_rules too (a
    prefix such as ``test_regions_stack[``) leaves nothing out: all_rules is then expected
    to fail as a whole. The ids are derived, not looked up among the collected items, so a
    rule item deselected by -k, or run by another pytest-xdist worker, counts the same."""
    own = vendor.item_ids(node)
    expectations = vendor.declarations(node.config).expectations
    found: dict[str, str] = {}
    for name in RULE_ITEMS:
        if name == ALL_RULES:
            continue
        ids = [i.replace(f"[{device}-{ALL_RULES}]", f"[{device}-{name}]") for i in own]
        hits = [e for e in expectations if e.matches(ids) and not e.matches(own)]
        if hits:
            best = max(hits, key=lambda e: len(e.pattern))
            found[name] = f"{best.reason} [{best.where}]"
    return found


def _all_rules_but_expected_failures(request: pytest.FixtureRequest, device: str) -> tuple:
    """Every rule, less those whose own item is an expected failure; say which were left
    out (printed, and as the item's user property), skip when no rule is left to run."""
    listed = expected_failures_of_rules(request.node, device)
    if not listed:
        return regions.RULES
    left_out = {r for name in listed for r in ((name,) if name != BASE else regions.BASE_RULES)}
    if "enter_region" in left_out:  # no region is ever open: the exit rules cannot run
        left_out |= regions.NEED_OPEN_REGION
    rules = tuple(r for r in regions.RULES if r not in left_out)
    note = (f"{ALL_RULES} left out the rules {', '.join(r for r in regions.RULES if r in left_out)}"
            ": their items are expected failures ("
            + "; ".join(f"{name}: {why}" for name, why in listed.items()) + ")")
    if not rules:
        pytest.skip(f"not applicable: {note}; no rule is left that can run")
    note += f"; it runs {', '.join(rules)}"
    print(note)
    request.node.user_properties.append((LEFT_OUT_PROPERTY, note))
    return rules


# -- the eligibility of the cast policies ----------------------------------------------


def _require_candidate(amp_settings, amp_target, amp_dtype, policy, op):
    reason = policy_properties.not_candidate(amp_target, amp_dtype, policy, op,
                                             amp_settings.oplists, amp_settings.numerics,
                                             amp_settings.forms)
    if reason:
        pytest.skip(f"not applicable: {op} is no {policy} op under autocast "
                    f"{devices.dtype_name(amp_dtype)} on {amp_target.device} "
                    f"({reason.removeprefix('not applicable: ')})")


@pytest.mark.amp_check("policy")
def test_policy_casts_only_eligible_inputs(amp_settings, amp_target, amp_dtype, policy, op):
    """Under autocast an op of the policy behaves like the op with autocast off on inputs
    cast by hand (only floating, non-float64 tensors of the device): same outcome, output
    dtypes, shapes and devices; all-eligible inputs give the policy's dtype; no ineligible
    input is converted. Each example calls the op with every input eligible, with a
    float64/integer/bool input beside eligible ones, and mixing devices (a tensor of the
    device first, so its Autocast kernel is entered, beside another device's tensors)
    where the op takes two tensors or more."""
    _require_candidate(amp_settings, amp_target, amp_dtype, policy, op)
    policy_properties.check_policy_property(
        amp_target, amp_dtype, policy, profiles.selected_part(), values=False,
        numerics=amp_settings.numerics, oplists=amp_settings.oplists, ops=[op],
        forms=amp_settings.forms,
    )


@pytest.mark.amp_check("policy")
@pytest.mark.amp_needs_values
def test_policy_equals_hand_cast_control(amp_settings, amp_target, amp_dtype, policy, op):
    """The values too: the autocast output equals the hand-cast control (bitwise by
    default, within tolerance with --numerics close)."""
    _require_candidate(amp_settings, amp_target, amp_dtype, policy, op)
    policy_properties.check_policy_property(
        amp_target, amp_dtype, policy, profiles.selected_part(), values=True,
        numerics=amp_settings.numerics, oplists=amp_settings.oplists, ops=[op],
        forms=amp_settings.forms,
    )
