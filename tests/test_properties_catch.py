"""The property checks, and the device-generic checks reworked with them, catch broken
autocast implementations.

Each test plants one bug (a monkeypatched ``autocast.__exit__``, ``_cast``,
``custom_fwd``/``custom_bwd``, or an Autocast kernel overridden from Python), runs a
property under the ``ci`` profile and asserts it fails naming the broken property; every
patch is undone by ``monkeypatch`` or a ``finally``, and the autocast state is checked to
be what it was. The counterpart — each property passes on the real implementation — is
the conformance suite itself (``amp_conformance/suite``). The last tests run the suite
module through pytest (``pytester``) to show what a user sees: the shrunk example and
the reproduction.
"""

from __future__ import annotations

import contextlib
import re
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, settings
from torch._C import DispatchKey, DispatchKeySet
from torch.amp import autocast_mode

import amp_conformance.suite
from amp_conformance.checks import profiles
from amp_conformance.checks.custom_fwd import check as cfp
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.checks.regions import machine as regions
from amp_conformance.core.casting import is_eligible
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState, StateLeak
from amp_conformance.core.target import Target

CPU = Target("cpu")
SUITE = Path(amp_conformance.suite.__file__).parent


@pytest.fixture
def ci(monkeypatch):
    """The ci profile (derandomized, 25 examples), whatever the run selected; restored
    afterwards: the very settings the suite runs with, so a bug caught here is a bug the
    suite catches."""
    monkeypatch.setattr(profiles, "_selected", "ci")
    return profiles.selected()


@pytest.fixture
def ci_part(ci):
    """The ci profile for an item of one part of a property (one op of a policy, one rule
    of the region machine): what the suite's per-op and per-rule items run."""
    return profiles.selected_part()


@pytest.fixture
def ci_generated(ci):
    """The ci profile's generated examples alone (no explicit examples, and no shrinking,
    which these tests do not need): what the generator by itself catches."""
    return settings(ci, phases=[Phase.generate])


@pytest.fixture(autouse=True)
def state_restored():
    """Every test leaves the autocast state (cpu and cuda) as it found it."""
    before = {d: AutocastState.capture(d) for d in ("cpu", "cuda")}
    yield
    for device, state in before.items():
        after = AutocastState.capture(device)
        state.restore()
        assert not state.diff(after), f"{device} autocast state leaked: {state.diff(after)}"


def _fails(run: Callable[[], None], property_name: str, *also: str) -> str:
    with pytest.raises(ConformanceFailure) as info:
        run()
    message = str(info.value)
    assert property_name in message, message
    for text in also:
        assert text in message, f"{text!r} not in:\n{message}"
    return message


# -- (a) the region stack ------------------------------------------------------------


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


@pytest.mark.parametrize("what", ["dtype", "enabled", "cache", "nesting", "swallow"])
def test_regions_machine_catches_broken_exit(monkeypatch, ci, what):
    """(a) an __exit__ that forgets the outer dtype (or enabled flag, cache flag, nesting
    depth, or swallows the body's exception) disagrees with the stack model."""
    monkeypatch.setattr(autocast_mode.autocast, "__exit__", _exit_forgetting(what))
    message = _fails(lambda: regions.run_regions_machine(CPU, ci),
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
    _fails(lambda: regions.run_regions_machine(Target("cuda", fake=True), ci),
           regions.PROPERTY, "target.autocast(", "cuda state")


class InheritingThread(threading.Thread):
    """A thread that starts with the autocast state (cpu) of the thread that made it."""

    def __init__(self, target=None, **kwargs):
        outer = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")

        def body():
            torch.set_autocast_enabled("cpu", outer[0])
            torch.set_autocast_dtype("cpu", outer[1])
            target()

        super().__init__(target=body, **kwargs)


def plant_inheriting_threads(monkeypatch) -> None:
    """Threads of the region machine inherit autocast state (only regions.py sees them)."""
    monkeypatch.setattr(regions, "threading", types.SimpleNamespace(Thread=InheritingThread))


def plant_undecorating_decorator(monkeypatch) -> None:
    """autocast used as a decorator returns the function as it was: no region."""
    monkeypatch.setattr(autocast_mode.autocast, "__call__", lambda self, func: func)


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
    _fails(lambda: regions.run_regions_machine(CPU, ci), regions.PROPERTY,
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
    _fails(lambda: regions.run_regions_machine(CPU, ci_part, rules=(*regions.BASE_RULES, rule)),
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
    _fails(lambda: regions.run_regions_machine(CPU, ci), regions.PROPERTY,
           "did not warn")


def test_regions_machine_leaves_state_when_it_fails(monkeypatch, ci):
    """Teardown puts the state back even when a step fails with regions still open."""
    monkeypatch.setattr(autocast_mode.autocast, "__exit__", _exit_forgetting("dtype"))
    before = AutocastState.capture("cpu")
    with pytest.raises(ConformanceFailure):
        regions.run_regions_machine(CPU, ci)
    monkeypatch.undo()
    assert not before.diff(AutocastState.capture("cpu"))


# -- (b) custom_fwd's cast_inputs ------------------------------------------------------

#: Each cast_inputs bug is caught by the suite's run (explicit examples first) and by the
#: generated examples alone: the generator reaches it, not only the hand-written cases.
PROFILES = pytest.mark.parametrize("profile", ["ci", "ci_generated"], indirect=True)


@pytest.fixture
def profile(request, ci, ci_generated):
    return {"ci": ci, "ci_generated": ci_generated}[request.param]


def _cast_without_dicts(real: Callable) -> Callable:
    def _cast(value, device_type, dtype):
        if isinstance(value, dict):
            return value  # the bug: no recursion into dicts
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    return _cast


@PROFILES
def test_cast_property_catches_cast_not_recursing_into_dicts(monkeypatch, profile):
    """(b) a _cast that does not recurse into dicts leaves their tensors uncast."""
    monkeypatch.setattr(autocast_mode, "_cast", _cast_without_dicts(autocast_mode._cast))
    _fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
           cfp.CAST_PROPERTY, "should arrive cast", "reproduce:")


@PROFILES
def test_cast_property_catches_cast_of_float64(monkeypatch, profile):
    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
            return value.to(dtype)  # the bug: float64 treated as eligible
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    real = autocast_mode._cast
    monkeypatch.setattr(autocast_mode, "_cast", _cast)
    _fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
           cfp.CAST_PROPERTY, "float64", "must reach forward untouched")


@PROFILES
def test_cast_property_catches_arrays_treated_as_iterables(monkeypatch, profile):
    """Without the ndarray special case an array would arrive as a generator."""
    pytest.importorskip("numpy", reason="the payloads hold numpy arrays only where it is installed")
    monkeypatch.setattr(autocast_mode, "HAS_NUMPY", False)
    _fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
           cfp.CAST_PROPERTY, "ndarray", "same object")


@PROFILES
def test_cast_property_catches_cast_of_other_device(monkeypatch, profile):
    """A _cast blind to the device: floating tensors of another device (meta beside cpu)
    are cast too."""
    real = autocast_mode._cast

    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.device.type != device_type:
            return value.to(dtype) if value.is_floating_point() and value.dtype != torch.float64 \
                else value  # the bug: any device is eligible
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return real(value, device_type, dtype)

    monkeypatch.setattr(autocast_mode, "_cast", _cast)
    _fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, profile),
           cfp.CAST_PROPERTY, "tensor on meta must reach forward untouched")


def test_cast_property_catches_forward_left_in_autocast(monkeypatch, ci):
    """A custom_fwd that casts but leaves autocast on while forward runs."""

    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        if fwd is None:
            return lambda f: custom_fwd(f, device_type=device_type, cast_inputs=cast_inputs)

        def decorate(*args, **kwargs):
            args[0]._dtype = torch.get_autocast_dtype(device_type)
            args[0]._fwd_used_autocast = False
            if cast_inputs is not None and torch.is_autocast_enabled(device_type):
                return fwd(*autocast_mode._cast(args, device_type, cast_inputs),
                           **autocast_mode._cast(kwargs, device_type, cast_inputs))
            return fwd(*args, **kwargs)

        return decorate

    monkeypatch.setattr(torch.amp, "custom_fwd", custom_fwd)
    _fails(lambda: cfp.check_cast_inputs_property(CPU, torch.bfloat16, ci),
           cfp.FORWARD_STATE_PROPERTY, "runs with autocast off")


# -- (c) custom_bwd --------------------------------------------------------------------


def test_backward_property_catches_custom_bwd_ignoring_forward_state(monkeypatch, ci):
    """(c) a custom_bwd that runs backward in whatever state backward() is called from."""

    def custom_bwd(bwd=None, *, device_type):
        return (lambda f: f) if bwd is None else bwd

    monkeypatch.setattr(torch.amp, "custom_bwd", custom_bwd)
    _fails(lambda: cfp.check_backward_property(CPU, ci), cfp.BACKWARD_PROPERTY,
           "reproduce:", "y.float().sum().backward()")


def test_backward_property_catches_custom_bwd_with_default_dtype(monkeypatch, ci):
    """A custom_bwd that restores the enabled flag but not the forward's dtype."""

    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return lambda f: custom_bwd(f, device_type=device_type)

        def decorate(*args, **kwargs):
            with torch.autocast(device_type, enabled=args[0]._fwd_used_autocast):
                return bwd(*args, **kwargs)

        return decorate

    monkeypatch.setattr(torch.amp, "custom_bwd", custom_bwd)
    _fails(lambda: cfp.check_backward_property(CPU, ci), cfp.BACKWARD_PROPERTY)


# -- eligibility of the policies -------------------------------------------------------


@contextlib.contextmanager
def autocast_cpu_kernel(op: str, kernel: Callable, key: str = "AutocastCPU") -> Iterator[None]:
    """Replace the ``key`` kernel of ``op`` (a vendor's broken kernel); undo on exit."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            lib.impl(op, kernel, key)
        yield
    finally:
        lib._destroy()


def below_autocast(fn: Callable, *args, key: str = "AutocastCPU"):
    with torch._C._ExcludeDispatchKeyGuard(DispatchKeySet(getattr(DispatchKey, key))):
        return fn(*args)


def _floating_to(dtype):
    return lambda t: t.to(dtype) if t.is_floating_point() else t


def test_lower_property_catches_cast_of_float64(ci_part):
    """A kernel that casts every floating input, float64 included."""

    def mm(a, b):
        cast = _floating_to(torch.get_autocast_dtype("cpu"))
        return below_autocast(torch.mm, cast(a), cast(b))

    with autocast_cpu_kernel("mm", mm):
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "torch.mm", "reproduce:")


def test_lower_values_property_catches_right_dtype_wrong_values(ci_part):
    """A kernel that computes in float32 and casts the result: the dtype is right, only
    the values test (bitwise against the hand-cast control) sees it."""

    def mm(a, b):
        def up(t):
            return t.float() if is_eligible(t, "cpu") else t

        out = below_autocast(torch.mm, up(a), up(b))
        return out.to(torch.get_autocast_dtype("cpu")) if out.dtype == torch.float32 else out

    with autocast_cpu_kernel("mm", mm):
        policy_properties.check_policy_property(  # dtypes agree: passes
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"])
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=True, ops=["mm"]),
            policy_properties.POLICIES["lower"], "values differ from the hand-cast control")


def test_fp32_property_catches_missing_cast(ci_part):
    """An fp32-policy kernel that forgets to cast lower-precision inputs to float32."""
    with autocast_cpu_kernel("mse_loss", lambda a, b, reduction=1: below_autocast(
            torch._C._nn.mse_loss, a, b, reduction)):
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "fp32", ci_part, values=False, ops=["mse_loss"]),
            policy_properties.POLICIES["fp32"])


def test_promote_property_catches_cast_to_autocast_dtype(ci_part):
    """A promote kernel that casts to the autocast dtype instead of the widest type."""

    def cat(tensors, dim=0):
        cast = _floating_to(torch.get_autocast_dtype("cpu"))
        return below_autocast(torch.cat, [cast(t) if t.dtype != torch.float64 else t
                                          for t in tensors], dim)

    with autocast_cpu_kernel("cat", cat):
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "promote", ci_part, values=False, ops=["cat"]),
            policy_properties.POLICIES["promote"])


def _device_blind_mm(device: str, key: str) -> Callable:
    """A lower-precision mm kernel that casts floating tensors of any device: a tensor of
    another device in the call is cast as if it were eligible."""

    def mm(a, b):
        def cast(t):
            blind = t.is_floating_point() and t.dtype != torch.float64
            return t.to(torch.get_autocast_dtype(device)) if blind else t

        return below_autocast(torch.mm, cast(a), cast(b), key=key)

    return mm


def test_lower_property_catches_kernel_blind_to_device(ci_part):
    """Only the calls that mix devices reach this bug (meta beside cpu): the other
    device's tensor is counted as cast, although the call then fails on both sides."""
    with autocast_cpu_kernel("mm", _device_blind_mm("cpu", "AutocastCPU")):
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "autocast cast an ineligible input",
            "tensor on meta")


def test_lower_property_catches_kernel_blind_to_device_on_fake_cuda(ci_part):
    """The same bug in the AutocastCUDA kernel, run through --fake: a cpu tensor is cast."""
    with autocast_cpu_kernel("mm", _device_blind_mm("cuda", "AutocastCUDA"), "AutocastCUDA"):
        _fails(lambda: policy_properties.check_policy_property(
            Target("cuda", fake=True), torch.float16, "lower", ci_part, values=False, ops=["mm"]),
            policy_properties.POLICIES["lower"], "autocast cast an ineligible input",
            "tensor on cpu")


def test_promote_property_catches_cast_of_integers(ci_part):
    """A promote kernel that also casts integer tensors to the widest type: cat promotes
    them to the same dtype anyway, so outputs and values agree; only the count of casts
    of the ineligible input sees it."""

    def cat(tensors, dim=0):
        widest = None
        for t in tensors:
            if is_eligible(t, "cpu"):
                widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
        if widest is None:
            return below_autocast(torch.cat, tensors, dim)
        cast = [t.to(widest) if is_eligible(t, "cpu") or not t.is_floating_point() else t
                for t in tensors]
        return below_autocast(torch.cat, cast, dim)

    with autocast_cpu_kernel("cat", cat):
        _fails(lambda: policy_properties.check_policy_property(
            CPU, torch.bfloat16, "promote", ci_part, values=True, ops=["cat"]),
            policy_properties.POLICIES["promote"], "autocast cast an ineligible input")


def test_policy_property_rejects_values_on_fake_target():
    with pytest.raises(ValueError, match="carries no values"):
        policy_properties.check_policy_property(
            Target("cuda", fake=True), torch.float16, "lower", profiles.selected(),
            values=True)


# -- device-generic checks whose assertions could not fire before ---------------------


def _suite_check_fails(check: Callable[[], None], *texts: str) -> str:
    """The suite check raises its own assertion (not the state-leak guard's) naming ``texts``."""
    with pytest.raises(AssertionError) as info:
        check()
    assert not isinstance(info.value, StateLeak), f"the guard fired first: {info.value}"
    for text in texts:
        assert text in str(info.value), f"{text!r} not in {info.value}"
    return str(info.value)


def test_eligibility_check_catches_addmm_casting_other_device():
    """On cpu the other device is meta: torch.addmm(meta scalar, m, m) enters the
    AutocastCPU kernel and fails on the device mix only after casting, so the check counts
    the casts of the meta tensor; a kernel that casts every floating tensor is caught."""
    import amp_conformance.checks.eligibility.mutants  # noqa: F401 (registers it)
    from amp_conformance.checks.registry import mutants
    from amp_conformance.suite import test_eligibility as eligibility
    CATALOGUE = mutants()

    eligibility.test_other_device_is_not_cast(CPU, torch.bfloat16)  # the real kernel passes
    undo = CATALOGUE["addmm-casts-other-device"].apply()
    try:
        _suite_check_fails(lambda: eligibility.test_other_device_is_not_cast(CPU, torch.bfloat16),
                           "torch.addmm: a meta tensor in the call was cast")
    finally:
        undo()


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
    _suite_check_fails(lambda: getattr(region_checks, check)(CPU, torch.float16), text)


@pytest.mark.parametrize("has_bf16", [False, True], ids=["no-bf16", "bf16-emulated-off"])
def test_cuda_bfloat16_check_catches_autocast_accepting_it(monkeypatch, has_bf16):
    """The bfloat16 refusal of a CUDA device, run here by making torch believe CUDA is
    there: a GPU without bfloat16, or one with it (the check then emulates one without).
    The real torch.autocast passes; one that ignores the capability is caught."""
    from amp_conformance.checks.errors import check as error_checks

    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: has_bf16)
    cuda = Target("cuda")
    error_checks.check_cuda_bfloat16_unsupported_raises(cuda)
    real_init = autocast_mode.autocast.__init__

    def accepting_init(self, *args, **kwargs):
        with contextlib.suppress(RuntimeError):  # the bug: bfloat16 accepted anyway
            real_init(self, *args, **kwargs)

    monkeypatch.setattr(autocast_mode.autocast, "__init__", accepting_init)
    with pytest.raises(ConformanceFailure, match="was accepted: a CUDA device without"):
        error_checks.check_cuda_bfloat16_unsupported_raises(cuda)


# -- through pytest: what a user sees ------------------------------------------------


BREAK_DICTS = '''
import torch
from torch.amp import autocast_mode

_real = autocast_mode._cast

def _cast(value, device_type, dtype):
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return _real(value, device_type, dtype)

def pytest_configure(config):
    autocast_mode._cast = _cast

def pytest_unconfigure(config):
    autocast_mode._cast = _real
'''


@pytest.fixture
def inner_run(pytester, monkeypatch):
    """Run pytest in-process; the profile it selects and any patch are undone after."""
    monkeypatch.setattr(profiles, "_selected", profiles._selected)
    monkeypatch.setattr(autocast_mode, "_cast", autocast_mode._cast)
    pytester.syspathinsert()
    return pytester


def test_suite_failure_shows_shrunk_example_and_reproduction(inner_run):
    inner_run.makepyfile(break_dicts=BREAK_DICTS)
    result = inner_run.runpytest(str(SUITE / "test_custom_fwd.py"), "-p", "break_dicts",
                                 "-k", "cast_inputs", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*custom_fwd(cast_inputs=...) casts exactly the eligible tensors*",
        "*should arrive cast*",
        "*reproduce:*",
        "*Failing explicit example*",
    ])


def test_profile_option_selects_profile(inner_run):
    inner_run.makepyfile(test_which="""
        from amp_conformance.checks import profiles

        def test_which():
            assert profiles.selected_name() == "nightly"
            assert profiles.selected().max_examples >= 1000
    """)
    result = inner_run.runpytest("--amp-hypothesis-profile", "nightly")
    result.assert_outcomes(passed=1)


def test_unknown_profile_is_a_usage_error(inner_run):
    inner_run.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = inner_run.runpytest("--amp-hypothesis-profile", "weekly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice: 'weekly'*"])


def test_profiles_registered():
    """ci is derandomized, deadline-free and small; nightly runs thousands of examples."""
    profiles.profiles()  # registered on first use
    ci = settings.get_profile(profiles.PREFIX + "ci")
    assert ci.derandomize and ci.deadline is None and ci.max_examples <= 50
    nightly = settings.get_profile(profiles.PREFIX + "nightly")
    assert nightly.max_examples >= 1000
