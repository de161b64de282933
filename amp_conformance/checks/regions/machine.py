"""A model of autocast state as a stack of regions, and a Hypothesis state machine
that drives real autocast regions against it.

Autocast state is per thread: for every device type an enabled flag and a dtype, plus
one cast-cache flag and a nesting depth shared by all device types. ``torch.autocast``
saves what it changes on entry and puts it back on exit, so the state at any moment is a
pure function of the regions currently open: a stack. The model keeps that stack; the
machine opens and closes regions (also as a decorator, by an exception, in a disabled
subregion, from another thread) and after every step compares what torch reports,
and what a probe op does, with the model. Any disagreement fails with the equivalent
Python code of the steps so far, so the shrunk example can be replayed by hand.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from amp_conformance.checks import strategies
from amp_conformance.checks.regions.model import (
    DeviceState,
    ModelState,
    Region,
    RegionsModel,
    accepted_dtypes,
    warns_disabled,
)
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure, first_line
from amp_conformance.core.probes import probe
from amp_conformance.core.state import AutocastState, nesting
from amp_conformance.core.target import Target

PROPERTY = "autocast regions stack"
MAX_DEPTH = 6
#: The rules of :class:`AutocastRegions`. The base rules open and close the regions the
#: others run inside: a machine of the base rules plus one rule checks that rule.
BASE_RULES = ("enter_region", "exit_region")
RULES = (*BASE_RULES, "exit_region_by_exception", "region_body_raises", "decorated_call",
         "disabled_subregion", "fresh_thread")
#: Rules that need an open region (a precondition on the depth): alone they never run.
NEED_OPEN_REGION = frozenset({"exit_region", "exit_region_by_exception"})
#: Dtypes that are no autocast dtype: torch.autocast warns and disables autocast.
UNSUPPORTED = (torch.float64, torch.float32)
_EXCEPTIONS = {"KeyError": KeyError, "RuntimeError": RuntimeError, "ValueError": ValueError}


# -- observing torch -----------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    enabled: bool
    dtype: torch.dtype
    cache_enabled: bool
    probe: torch.dtype | str

    @classmethod
    def expected(cls, state: ModelState, device: str) -> Observed:
        s = state.devices[device]
        return cls(s.enabled, s.dtype, state.cache_enabled, s.probe_dtype())

    def __str__(self) -> str:
        return f"({self.enabled}, {self.dtype}, {self.cache_enabled}, {self.probe})"


def observe(device: str) -> Observed:
    """torch's view of ``device``'s autocast state, and what the probe op does.

    Runs in the caller's tensor context (the target's FakeTensorMode when fake).
    """
    try:
        out: torch.dtype | str = probe(device)
    except Exception as exc:  # reported as a disagreement, with the error
        out = f"raised {type(exc).__name__}: {first_line(exc)}"
    return Observed(
        torch.is_autocast_enabled(device),
        torch.get_autocast_dtype(device),
        torch.is_autocast_cache_enabled(),
        out,
    )


def observe_in_new_thread(target: Target, device_types: tuple[str, ...]) -> tuple[dict, int]:
    found: dict[str, Any] = {}

    def body() -> None:
        try:
            with target.tensors():  # a context of this thread's own
                found["states"] = {d: observe(d) for d in device_types}
            found["nesting"] = nesting()
        except BaseException as exc:  # handed to the main thread
            found["error"] = exc

    thread = threading.Thread(target=body, name="amp-conformance-fresh-thread")
    thread.start()
    thread.join()
    if "error" in found:
        raise found["error"]
    return found["states"], found["nesting"]


# -- the state machine ---------------------------------------------------------------


def region_devices(target: Target) -> tuple[str, ...]:
    """The device under test, and cpu (autocast state is per device type)."""
    return tuple(dict.fromkeys((target.device, "cpu")))


def rejecting_devices(target: Target) -> frozenset[str]:
    """Devices whose regions go through torch.autocast's warn-and-disable dtype check."""
    return frozenset(
        d for d in region_devices(target)
        if devices.profile(d).rejects_unsupported_dtype and not (target.fake and d == target.device)
    )


def region_dtypes(target: Target, device: str) -> tuple[torch.dtype | None, ...]:
    """Dtypes to enter regions with: supported ones, None (the current), unsupported ones.

    Unsupported dtypes are generated only where the entry point is torch.autocast's own
    warn-and-disable path (the fake target switches the state directly and has none).
    """
    fake = target.fake and device == target.device
    dtypes: list[torch.dtype | None] = list(devices.supported_amp_dtypes(device, fake))
    dtypes.append(None)
    if device in rejecting_devices(target):
        dtypes += [d for d in UNSUPPORTED if d not in accepted_dtypes(device)]
    return tuple(dtypes)


@functools.cache
def regions(target: Target) -> st.SearchStrategy[Region]:
    """A region of one of the devices. Each device's strategy is made once: flatmap calls
    its function at every draw, and a strategy made afresh is validated afresh."""
    by_device = {device: st.builds(Region, st.just(device),
                                   st.sampled_from(region_dtypes(target, device)),
                                   st.booleans(), st.sampled_from((None, True, False)))
                 for device in region_devices(target)}
    return st.sampled_from(tuple(by_device)).flatmap(by_device.__getitem__)


def _step(fn: Callable) -> Callable:
    """Record which rule runs, for the failure message (applied under ``@rule``)."""

    @functools.wraps(fn)
    def run(self: AutocastRegions, *args: Any, **kwargs: Any) -> Any:
        self.step = fn.__name__
        return fn(self, *args, **kwargs)

    return run


class AutocastRegions(RuleBasedStateMachine):
    """Open and close autocast regions; after every step torch must agree with the model.

    Module-level, so its rules read as one class; the device under test is a class
    attribute that :func:`make_machine` sets on a subclass (the strategies that depend on
    it are drawn inside the rules from ``st.data()``).
    """

    target: Target
    #: the rules this machine runs (:func:`make_machine` hides the others)
    rule_names: tuple[str, ...] = RULES

    def __init__(self) -> None:
        super().__init__()
        target = self.target
        self.step = "the first step"  # the rule running, or last run (named by failures)
        self.device_types = region_devices(target)
        # The target's tensor context (FakeTensorMode when fake) is held for the
        # whole run of this machine and left in teardown: one per run, because
        # making one costs far more than a probe.
        self.tensors = contextlib.ExitStack()
        self.tensors.enter_context(target.tensors())
        self.snapshot = AutocastState.capture(target.device)
        initial = ModelState(
            {d: DeviceState(torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
             for d in self.device_types},
            torch.is_autocast_cache_enabled(),
            nesting(),
        )
        rejecting = rejecting_devices(target)
        self.model = RegionsModel(initial, rejecting, warns_disabled(rejecting))
        self.open: list[tuple[int, Any]] = []
        self.failed = False
        self.counter = 0
        self.script = self._header()

    # -- reproduction ------------------------------------------------------------

    def _header(self) -> list[str]:
        lines = ["import threading", "import torch",
                 "from amp_conformance.core.probes import probe"]
        if self.target.fake:
            lines += ["from amp_conformance.core.target import Target",
                      f"target = Target({self.target.device!r}, fake=True)",
                      "def observe(dev):",
                      "    with target.tensors():",
                      "        p = probe(dev)"]
        else:
            lines += ["def observe(dev):", "    p = probe(dev)"]
        lines += ["    return (torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev), "
                  "torch.is_autocast_cache_enabled(), p)"]
        return lines

    def _source(self, region: Region) -> str:
        if self.target.fake and region.device == self.target.device:
            return (f"target.autocast({region.dtype}, enabled={region.enabled}, "
                    f"cache_enabled={region.cache_enabled})")
        return (f"torch.autocast({region.device!r}, dtype={region.dtype}, "
                f"enabled={region.enabled}, cache_enabled={region.cache_enabled})")

    def _fail(self, problem: str, check: str = "") -> None:
        self.failed = True
        body = "\n".join("    " + line for line in self.script + ([check] if check else []))
        raise ConformanceFailure(
            f"{PROPERTY} on {self.target}, in rule {self.step} (machine of the rules "
            f"{', '.join(self.rule_names)}): {problem}\n"
            f"  reproduce (equivalent Python of the steps so far):\n{body}"
        )

    # -- driving torch -----------------------------------------------------------

    def _context(self, region: Region) -> Any:
        if self.target.fake and region.device == self.target.device:
            return self.target.autocast(region.dtype, region.enabled, region.cache_enabled)
        return torch.autocast(region.device, dtype=region.dtype, enabled=region.enabled,
                              cache_enabled=region.cache_enabled)

    def _check_warning(self, region: Region, caught: list, warns: bool, check: str) -> None:
        disabling = [str(w.message) for w in caught
                     if issubclass(w.category, UserWarning) and "isabling autocast" in
                     str(w.message)]
        if warns and not disabling:
            self._fail(f"entering {region!r} did not warn that it disables autocast "
                       f"({region.dtype or 'the current dtype'} is no autocast dtype of "
                       f"{region.device})", check)
        if disabling and not warns:
            self._fail(f"entering {region!r} warned {disabling[0]!r}, expected no warning",
                       check)

    def _check_state(self, expected: ModelState, where: str) -> None:
        for device in self.device_types:
            got = observe(device)
            want = Observed.expected(expected, device)
            if got != want:
                self._fail(
                    f"{where}: {device} state (enabled, dtype, cache_enabled, mm of float32) "
                    f"is {got}, the region stack gives {want}",
                    f"print(observe({device!r}))  # expected {want}",
                )
        depth = nesting()
        if depth != expected.nesting:
            self._fail(f"{where}: autocast nesting depth is {depth}, the region stack "
                       f"gives {expected.nesting}",
                       "print(torch.autocast_increment_nesting() - 1); "
                       f"torch.autocast_decrement_nesting()  # expected {expected.nesting}")

    # -- rules -------------------------------------------------------------------

    def _draw_region(self, data: st.DataObject) -> Region:
        return data.draw(regions(self.target), label="region")

    @precondition(lambda self: self.model.depth < MAX_DEPTH)
    @rule(data=st.data())
    @_step
    def enter_region(self, data: st.DataObject) -> None:
        """Enter a region and keep it open across the following steps."""
        region = self._draw_region(data)
        self.counter += 1
        name = f"r{self.counter}"
        self.script.append(f"{name} = {self._source(region)}; {name}.__enter__()")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            context = self._context(region)
            context.__enter__()
        self.open.append((self.counter, context))
        warns = self.model.enter(region)
        self._check_warning(region, caught, warns, f"# entering {name}")

    @precondition(lambda self: self.model.depth > 0)
    @rule()
    @_step
    def exit_region(self) -> None:
        number, context = self.open.pop()
        self.model.exit()
        self.script.append(f"r{number}.__exit__(None, None, None)")
        context.__exit__(None, None, None)

    @precondition(lambda self: self.model.depth > 0)
    @rule(error=st.sampled_from(tuple(_EXCEPTIONS)))
    @_step
    def exit_region_by_exception(self, error: str) -> None:
        """Leave the innermost open region because its body raised."""
        number, context = self.open.pop()
        self.model.exit()
        exc = _EXCEPTIONS[error]("raised inside the region")
        self.script.append(
            f"r{number}.__exit__({error}, {error}('raised inside the region'), None)")
        suppressed = context.__exit__(type(exc), exc, None)
        if suppressed:
            self._fail(f"the region's __exit__ swallowed a {error} raised inside it",
                       f"# r{number}.__exit__ returned {suppressed!r}")

    @rule(data=st.data(), error=st.sampled_from(tuple(_EXCEPTIONS)))
    @_step
    def region_body_raises(self, data: st.DataObject, error: str) -> None:
        """A complete region whose body raises: the error propagates, the state returns."""
        region = self._draw_region(data)
        inside, warns = self.model.entered(region)
        self.script += ["try:", f"    with {self._source(region)}:",
                        f"        print(observe({region.device!r}))  # expected "
                        f"{Observed.expected(inside, region.device)}",
                        f"        raise {error}('raised inside the region')",
                        f"except {error}:", "    pass"]
        exc_type = _EXCEPTIONS[error]
        propagated = False
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with self._context(region):
                    self.model.enter(region)
                    try:
                        self._check_state(inside, f"inside {region!r}")
                    finally:
                        self.model.exit()
                    raise exc_type("raised inside the region")
            except exc_type:
                propagated = True
        if not propagated:
            self._fail(f"a {error} raised inside {region!r} did not propagate")
        self._check_warning(region, caught, warns, "# entering the region above")

    @rule(data=st.data(), raises=st.booleans(), calls=st.integers(1, 2))
    @_step
    def decorated_call(self, data: st.DataObject, raises: bool, calls: int) -> None:
        """autocast used as a decorator: each call enters and leaves the region."""
        region = self._draw_region(data)
        inside, warns = self.model.entered(region)
        expected = Observed.expected(inside, region.device)
        seen: list[Observed] = []
        self.script += [f"@{self._source(region)}", "def body():",
                        f"    print(observe({region.device!r}))  # expected {expected}"]
        if raises:
            self.script.append("    raise KeyError('raised inside the decorated function')")

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")

            @self._context(region)
            def body() -> None:
                seen.append(observe(region.device))
                if raises:
                    raise KeyError("raised inside the decorated function")

        for _ in range(calls):
            if raises:
                self.script += ["try:", "    body()", "except KeyError:", "    pass"]
            else:
                self.script.append("body()")
            with warnings.catch_warnings(record=True) as more:
                warnings.simplefilter("always")
                try:
                    body()
                except KeyError:
                    if not raises:
                        raise
                else:
                    if raises:
                        self._fail("a KeyError raised inside a decorated function did not "
                                   "propagate")
            caught += more
            if seen[-1] != expected:
                self._fail(f"inside a function decorated with {region!r}: {region.device} "
                           f"state is {seen[-1]}, expected {expected}", "body()")
            self._check_state(self.model.current, "after a decorated function returned")
        self._check_warning(region, caught, warns, "# calling the decorated function")

    @rule(data=st.data())
    @_step
    def disabled_subregion(self, data: st.DataObject) -> None:
        """An enabled=False subregion turns autocast off inside; leaving it restores."""
        device = data.draw(strategies.sampled(self.device_types), label="device")
        region = Region(device, None, False, None)
        inside, _ = self.model.entered(region)
        self.script += [f"with {self._source(region)}:",
                        f"    print(observe({device!r}))  # expected "
                        f"{Observed.expected(inside, device)}"]
        with self._context(region):
            self.model.enter(region)
            try:
                self._check_state(inside, f"inside {region!r}")
            finally:
                self.model.exit()

    @rule()
    @_step
    def fresh_thread(self) -> None:
        """Autocast state is per thread: a new thread starts with autocast off."""
        expected = self.model.fresh_thread()
        self.script.append(
            "t = threading.Thread(target=lambda: print([observe(d) for d in "
            f"{list(self.device_types)!r}])); t.start(); t.join()")
        states, depth = observe_in_new_thread(self.target, self.device_types)
        for device, got in states.items():
            want = Observed.expected(expected, device)
            if got != want:
                self._fail(f"in a new thread the {device} state is {got}, expected {want} "
                           "(autocast state is thread-local and starts off)",
                           "# the thread above")
        if depth != 0:
            self._fail(f"a new thread starts at autocast nesting depth {depth}, expected 0")

    @invariant()
    def agrees_with_model(self) -> None:
        self._check_state(self.model.current, "after the last step")

    def teardown(self) -> None:
        """Leave every open region, then put the state back exactly as it was found."""
        leftover: list[str] = []
        self.step = f"teardown (after {self.step})"
        try:
            while self.open:
                number, context = self.open.pop()
                self.model.exit()
                self.script.append(f"r{number}.__exit__(None, None, None)")
                context.__exit__(None, None, None)
            leftover = self.snapshot.diff(AutocastState.capture(self.target.device))
        finally:
            self.snapshot.restore()
            self.tensors.close()
        if leftover and not self.failed:
            self._fail("after leaving every region the state differs from before the "
                       "first: " + "; ".join(leftover), "# (state after the last exit)")


def rule_set(rules: Iterable[str]) -> tuple[str, ...]:
    """``rules`` in the order of RULES; ValueError for an unknown or unrunnable set."""
    chosen = set(rules)
    if chosen - set(RULES) or chosen <= NEED_OPEN_REGION:
        raise ValueError(f"no state machine of the rules {sorted(chosen)}: the rules are "
                         f"{', '.join(RULES)}, and one that opens no region is needed")
    return tuple(r for r in RULES if r in chosen)


def make_machine(target: Target, rules: Iterable[str] = RULES) -> type[AutocastRegions]:
    """The state machine for ``target`` that runs ``rules`` only (default: every rule)."""
    return _machine(target, rule_set(rules))


@functools.cache
def _machine(target: Target, rules: tuple[str, ...]) -> type[AutocastRegions]:
    """A subclass naming the device under test and its rules; the rules it leaves out are
    hidden by attributes set to None (Hypothesis finds rules with inspect.getmembers)."""
    name = f"AutocastRegions_{target.device}{'_fake' if target.fake else ''}"
    name += "" if rules == RULES else "__" + "__".join(rules)
    hidden = dict.fromkeys(set(RULES) - set(rules))
    machine = type(name, (AutocastRegions,), {"target": target, "rule_names": rules,
                                              "__qualname__": name, **hidden})
    setup = getattr(machine, "setup_state", None)  # or rules(), in older Hypothesis
    found = sorted(r.function.__name__ for r in (setup().rules if setup else machine.rules()))
    if found != sorted(rules):
        raise RuntimeError(f"{name}: Hypothesis finds the rules {found}, not {sorted(rules)}")
    return machine


def run_regions_machine(
    target: Target, settings: Settings, machine: Callable[[], RuleBasedStateMachine] | None = None,
    rules: Iterable[str] = RULES,
) -> None:
    """Run the state machine for ``target`` with ``rules`` under ``settings``; raise on a
    disagreement (naming the rule; any other error gets a note naming the rules)."""
    chosen = rule_set(rules)
    try:
        run_state_machine_as_test(machine or make_machine(target, chosen), settings=settings)
    except Exception as exc:
        if not isinstance(exc, ConformanceFailure):
            exc.add_note(f"{PROPERTY} on {target}: machine of the rules {', '.join(chosen)}")
        raise
