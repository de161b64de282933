"""The items of the wrapper tier: one :class:`WrapperCase` per (wrapper, precision, check).

Ids read ``<device>-<amp dtype>-<wrapper>-<precision>-<check>`` for a region factory's
per-precision checks (``cpu-bfloat16-open_clip.get_autocast-amp_bf16-state``),
``<device>-<wrapper>-<check>`` for its once-per-wrapper checks and for a forward
decorator's. A case that does not apply is generated with the reason it is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from amp_conformance.checks.wrappers.declare import (
    Float32Island,
    ForwardDecorator,
    Predicate,
    RegionFactory,
    RegionRunner,
    RegionSwap,
    Scaler,
    Wrapper,
)
from amp_conformance.core import devices
from amp_conformance.core.target import FAKE_AUTOGRAD

#: every kind's check that it reads and changes its own device's autocast state alone
DEVICES = "devices"
#: a region factory's checks, once per precision name
REGION_CHECKS = ("state", "restored", "nesting", "decorator", "cache", "policy", "nest",
                 "reuse", "threads", "cache_mix", DEVICES)
#: a region factory's checks, once per wrapper
REGION_ONCE = ("float32", "unknown")
#: a forward decorator's checks (``casts`` is ``uncast`` on a claimed device it does not cast on)
FORWARD_CHECKS = ("casts", "inside", "kwargs", "backward", "outside", "eligible", "after",
                  "grad", DEVICES)
#: a region runner's checks, once per precision name
RUNNER_CHECKS = ("state", "restored", "nesting", DEVICES)
#: a float32 island's checks, once per amp dtype of the run
ISLAND_CHECKS = ("float32", "restored", "nesting", "grad", "numerics", DEVICES)
#: a region swap's checks, once per amp dtype of the run (the region it is entered in)
SWAP_CHECKS = ("state", "restored", "nesting", "outside", DEVICES)
#: a predicate's checks, once per amp dtype of the run
PREDICATE_CHECKS = ("state", "nesting", DEVICES)
#: a scaler's checks (the gradscaler family's training orders), once per wrapper
SCALER_CHECKS = ("scales", "skips", "unscale", "state_dict")
#: the checks that need autograd through the device's tensors (on a fake device, not
#: applicable: fake_device.py); a decorator's backward state needs none (fake_device.on_host)
AUTOGRAD = {("region", "cache"), ("region", "cache_mix"), ("forward", "grad"),
            ("island", "grad"), ("scaler", "skips"), ("scaler", "unscale"),
            ("scaler", "state_dict")}
#: the kinds whose items are made once per amp dtype of the run (the dtype in their ids)
PER_DTYPE = ("island", "swap", "predicate")
_KIND = {RegionFactory: "region", RegionRunner: "runner", Float32Island: "island",
         ForwardDecorator: "forward", RegionSwap: "swap", Predicate: "predicate",
         Scaler: "scaler"}


@dataclass(frozen=True)
class WrapperCase:
    """One wrapper item: which wrapper, on which device, which check, for which precision."""

    wrapper: Wrapper
    device: str
    check: str
    #: a region precision's declared dtype; for a forward decorator, the dtype of the
    #: torch.autocast region its forward is called in
    amp_dtype: torch.dtype
    precision: str | None = None

    #: the device is faked (FakeTensorMode; its autocast state switched directly)
    fake: bool = False

    @property
    def kind(self) -> str:
        return _KIND[type(self.wrapper)]

    @property
    def id(self) -> str:
        if self.kind in PER_DTYPE:
            return (f"{self.device}-{devices.dtype_name(self.amp_dtype)}-{self.wrapper.name}-"
                    f"{self.check}")
        if self.precision is None:
            return f"{self.device}-{self.wrapper.name}-{self.check}"
        return (f"{self.device}-{devices.dtype_name(self.amp_dtype)}-{self.wrapper.name}-"
                f"{self.precision}-{self.check}")


def claims(wrapper: Wrapper, device: str) -> bool:
    return device in wrapper.devices


def cases(wrappers: Sequence[Wrapper], device: str,
          run_dtypes: Sequence[torch.dtype], fake: bool = False) -> list[WrapperCase]:
    """Every case of the wrappers that claim ``device`` (none for the others)."""
    found: list[WrapperCase] = []
    for w in wrappers:
        if not claims(w, device):
            continue
        if isinstance(w, RegionFactory):
            for precision, dtype in w.precisions.items():
                found += [WrapperCase(w, device, c, dtype, precision, fake)
                          for c in REGION_CHECKS]
            first = next(iter(w.precisions.values()))
            found += [WrapperCase(w, device, c, first, fake=fake) for c in REGION_ONCE]
        elif isinstance(w, RegionRunner):
            found += [WrapperCase(w, device, c, dtype, precision, fake)
                      for precision, dtype in w.precisions.items() for c in RUNNER_CHECKS]
        elif isinstance(w, (Float32Island, RegionSwap, Predicate)):
            checks = {Float32Island: ISLAND_CHECKS, RegionSwap: SWAP_CHECKS,
                      Predicate: PREDICATE_CHECKS}[type(w)]
            found += [WrapperCase(w, device, c, dtype, fake=fake)
                      for dtype in run_dtypes or (torch.bfloat16,) for c in checks]
        elif isinstance(w, Scaler):
            dtype = torch.float16 if torch.float16 in run_dtypes or not run_dtypes \
                else run_dtypes[0]
            found += [WrapperCase(w, device, c, dtype, fake=fake) for c in SCALER_CHECKS]
        else:
            dtype = run_dtypes[0] if run_dtypes else torch.bfloat16
            found += [WrapperCase(w, device, _forward_check(w, device, c), dtype, fake=fake)
                      for c in FORWARD_CHECKS]
    return found


def _forward_check(w: ForwardDecorator, device: str, check: str) -> str:
    return "uncast" if check == "casts" and device not in w.casts_on else check


def not_applicable(case: WrapperCase, run_dtypes: Sequence[torch.dtype], fake: bool,
                   cast_cache: bool = True) -> str | None:
    """Why ``case`` does not apply to this run, or None."""
    if fake and (case.kind, case.check) in AUTOGRAD:
        return FAKE_AUTOGRAD.format(device=case.device)
    if fake and case.kind == "island" and case.check == "numerics":
        return "not applicable in --fake mode: fake tensors carry no values"
    w = case.wrapper
    if isinstance(w, Float32Island):
        if w.amp_dtypes and case.amp_dtype not in w.amp_dtypes:
            return (f"not applicable: {w.name} leaves only "
                    f"{', '.join(devices.dtype_name(d) for d in w.amp_dtypes)} regions "
                    "(declared amp_dtypes)")
        return None
    if isinstance(w, RegionRunner):
        return _precision_not_run(case, run_dtypes)
    if isinstance(w, Scaler):
        return (f"not applicable: {w.name} declares clips=False (the unscale-once check "
                "clips between unscale_ and step)") if case.check == "unscale" and not w.clips \
            else None
    if isinstance(w, (RegionSwap, Predicate)):
        return None
    if isinstance(w, ForwardDecorator):
        return _forward_not_applicable(w, case)
    noop = w.noop_devices.get(case.device)
    if _precision_not_run(case, run_dtypes):
        return _precision_not_run(case, run_dtypes)
    if case.check == "decorator" and not w.decorator:
        return f"not applicable: {w.name} declares decorator=False"
    if case.check in ("cache", "cache_mix"):
        if not w.clears_cache:
            return f"not applicable: {w.name} declares clears_cache=False"
        if not cast_cache:
            return f"not applicable: {case.device} declares no cast cache"
    if case.check in ("cache", "cache_mix", "policy") and noop is not None:
        return f"not applicable: {w.name} declares itself a no-op on {case.device} ({noop})"
    if case.check == "float32" and not w.float32_names:
        return f"not applicable: {w.name} declares no float32 name (float32_names is empty)"
    if case.check == "float32" and case.device in w.float32_unclaimed:
        return (f"not applicable: {w.name} claims nothing for its float32 names on "
                f"{case.device} (declared float32_unclaimed): "
                f"{w.float32_unclaimed[case.device]}")
    return None


def _precision_not_run(case: WrapperCase, run_dtypes: Sequence[torch.dtype]) -> str | None:
    if case.precision is not None and case.amp_dtype not in run_dtypes:
        return (f"not applicable: precision {case.precision!r} sets "
                f"{devices.dtype_name(case.amp_dtype)}, which this run does not check "
                f"(--amp-dtype or the device's declared dtypes)")
    return None


def _forward_not_applicable(w: ForwardDecorator, case: WrapperCase) -> str | None:
    if case.check == "kwargs" and not w.extra_kwargs:
        return f"not applicable: {w.name} declares no extra keyword (extra_kwargs is empty)"
    if case.check == "backward" and w.decorate_backward is None:
        return f"not applicable: {w.name} declares no decorate_backward"
    return None
