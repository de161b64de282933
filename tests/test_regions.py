"""The regions family (checks/regions) catches broken autocast regions: its state machine
(``machine.py``, the property of the region stack) and the suite's region checks
(``suite/test_regions.py``).

Each test plants one bug (a monkeypatched ``autocast.__exit__``, ``__init__`` or
decorator, or threads that inherit autocast state), runs the machine under the ``ci``
profile, or one suite check, and asserts it fails naming what broke; every patch is undone
by ``monkeypatch``, and the autocast state is checked to be what it was. The counterpart,
the machine passing on the real implementation, is the conformance suite itself.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable

import pytest
import torch
from torch.amp import autocast_mode

from amp_conformance.checks.regions import machine as regions
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from tests.mutants import (
    CPU,
    plant_inheriting_threads,
    plant_undecorating_decorator,
    property_fails,
    suite_check_fails,
)

pytestmark = pytest.mark.usefixtures("state_restored")


# -- the region stack ----------------------------------------------------------------


def _exit_forgetting(what: str) -> Callable:
    """An autocast.__exit__ that leaves one piece of the outer state unrestored."""

    def __exit__(self, exc_type, exc_val, exc_tb):
        if what == "nesting" or torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        if what != "enabled":
            torch.set_autocast_enabled(self.device, self.prev)
        if what != "dtype":
            torch.set_autocast_dtype(self.device, self.prev_fastdtype)
        if what != "cache":
            torch.set_autocast_cache_enabled(self.prev_cache_enabled)
        return what == "swallow"

    return __exit__


@pytest.mark.slow
@pytest.mark.parametrize("what", ["dtype", "enabled", "cache", "nesting", "swallow"])
def test_regions_machine_catches_broken_exit(monkeypatch, ci, what):
    """(a) an __exit__ that forgets the outer dtype (or enabled flag, cache flag, nesting
    depth, or swallows the body's exception) disagrees with the stack model."""
    monkeypatch.setattr(autocast_mode.autocast, "__exit__", _exit_forgetting(what))
    message = property_fails(lambda: regions.run_regions_machine(CPU, ci),
                             regions.PROPERTY, "reproduce (equivalent Python")
    if what == "dtype":
        assert re.search(r"is \(\w+, torch\.\w+, \w+, torch\.\w+\), the region stack gives",
                         message), message


def test_regions_machine_checks_the_fake_target(monkeypatch, ci):
    """Under --fake the device's regions go through Target.autocast: a switch that does
    not put the outer dtype back is caught there too (and the fake device is probed)."""
    from amp_conformance.core import target as target_module

    real = target_module._switched_autocast

    @contextlib.contextmanager
    def switched_keeping_dtype(device, dtype, enabled, cache_enabled):
        kept = torch.get_autocast_dtype(device)
        with real(device, dtype, enabled, cache_enabled):
            yield
            kept = torch.get_autocast_dtype(device)
        torch.set_autocast_dtype(device, kept)  # the bug: the inner dtype survives the exit

    monkeypatch.setattr(target_module, "_switched_autocast", switched_keeping_dtype)
    property_fails(lambda: regions.run_regions_machine(Target("cuda", fake=True), ci),
                   regions.PROPERTY, "target.autocast(", "cuda state")


def plant_exit_forgetting_dtype_on_error(monkeypatch) -> None:
    """An __exit__ that forgets the outer dtype when the region's body raised."""
    real = autocast_mode.autocast.__exit__

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is None:
            return real(self, exc_type, exc_val, exc_tb)
        return _exit_forgetting("dtype")(self, exc_type, exc_val, exc_tb)

    monkeypatch.setattr(autocast_mode.autocast, "__exit__", __exit__)


def test_regions_machine_catches_state_shared_across_threads(monkeypatch, ci):
    """A new thread that inherits this thread's autocast state breaks thread-locality."""
    plant_inheriting_threads(monkeypatch)
    property_fails(lambda: regions.run_regions_machine(CPU, ci), regions.PROPERTY,
                   "in a new thread", "in rule fresh_thread")


#: the rules that leave a region by an exception
_RAISING = {"region_body_raises", "exit_region_by_exception", "decorated_call"}
#: rule -> (a planted bug the rule reaches, every rule that reaches it, what the failure says)
RULE_BUGS = {
    "decorated_call": (plant_undecorating_decorator, {"decorated_call"},
                       "inside a function decorated with"),
    "fresh_thread": (plant_inheriting_threads, {"fresh_thread"}, "in a new thread"),
    "region_body_raises": (plant_exit_forgetting_dtype_on_error, _RAISING, "state"),
    "exit_region_by_exception": (plant_exit_forgetting_dtype_on_error, _RAISING, "state"),
}


@pytest.mark.parametrize("rule", list(RULE_BUGS))
def test_rule_bug_caught_by_its_own_machine(monkeypatch, ci, ci_part, rule):
    """(d) a bug that the base rules do not reach fails the machine of the base rules plus
    the rule (what its suite item runs), naming the rule; the machine of the rules that
    do not reach it (what all_rules runs when their items are expected failures) passes."""
    plant, reached_by, text = RULE_BUGS[rule]
    plant(monkeypatch)
    property_fails(
        lambda: regions.run_regions_machine(CPU, ci_part, rules=(*regions.BASE_RULES, rule)),
        regions.PROPERTY, f"in rule {rule} (machine of the rules enter_region, exit_region, "
        f"{rule})", text)
    regions.run_regions_machine(CPU, ci, rules=set(regions.RULES) - reached_by)


def test_machine_hides_the_rules_left_out():
    """make_machine(target, rules): Hypothesis (as installed) finds exactly those rules."""
    machine = regions.make_machine(CPU, ["fresh_thread", "enter_region", "exit_region"])
    assert machine.rule_names == ("enter_region", "exit_region", "fresh_thread")
    assert machine is regions.make_machine(CPU, ("enter_region", "exit_region", "fresh_thread"))
    found = {r.function.__name__ for r in machine.setup_state().rules}
    assert found == {"enter_region", "exit_region", "fresh_thread"}
    assert machine.decorated_call is None
    every = {r.function.__name__ for r in regions.make_machine(CPU).setup_state().rules}
    assert every == set(regions.RULES)
    for bad in (["no_such_rule"], ["exit_region"], []):
        with pytest.raises(ValueError, match="no state machine of the rules"):
            regions.make_machine(CPU, bad)


def test_regions_machine_catches_entry_that_does_not_warn(monkeypatch, ci):
    """An unsupported dtype (float64) must warn and disable; entering silently is caught."""
    real_init = autocast_mode.autocast.__init__

    def silent_init(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real_init(self, *args, **kwargs)

    monkeypatch.setattr(autocast_mode.autocast, "__init__", silent_init)
    property_fails(lambda: regions.run_regions_machine(CPU, ci), regions.PROPERTY,
                   "did not warn")


def test_regions_machine_leaves_state_when_it_fails(monkeypatch, ci):
    """Teardown puts the state back even when a step fails with regions still open."""
    monkeypatch.setattr(autocast_mode.autocast, "__exit__", _exit_forgetting("dtype"))
    before = AutocastState.capture("cpu")
    with pytest.raises(ConformanceFailure):
        regions.run_regions_machine(CPU, ci)
    monkeypatch.undo()
    assert not before.diff(AutocastState.capture("cpu"))


# -- the suite's region checks: their own assertions, not the state-leak guard's -------


@pytest.mark.parametrize("check, text", [
    ("test_region_sets_and_restores_state", "state after the region"),
    ("test_state_restored_when_body_raises", "state after an exception in the region"),
    ("test_decorator_form", "still enabled after the decorated function returned"),
])
def test_region_checks_catch_exit_leaving_autocast_enabled(monkeypatch, check, text):
    """An __exit__ that leaves autocast enabled fails each check with its own message: the
    assertions sit inside the state-leak guard, which would otherwise fire first."""
    from amp_conformance.suite import test_regions as region_checks

    getattr(region_checks, check)(CPU, torch.float16)  # the real __exit__ passes
    monkeypatch.setattr(autocast_mode.autocast, "__exit__", _exit_forgetting("enabled"))
    suite_check_fails(lambda: getattr(region_checks, check)(CPU, torch.float16), text)
