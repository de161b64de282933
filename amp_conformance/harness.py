"""Run one op-list entry on a target and check what autocast did to it.

Each ``check_*`` function raises :class:`ConformanceFailure` with a message naming the
op, entry, device and autocast dtype, expected and actual dtypes, and a short
copy-paste reproduction; they return normally when the behaviour conforms.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import argspec, devices
from .oplist import Entry, variants
from .state import unchanged_autocast_state
from .target import Target


class ConformanceFailure(AssertionError):
    """An autocast behaviour that departs from the op list."""


@dataclass(frozen=True)
class Case:
    """One (device, autocast dtype, entry) combination: a single generated test item."""

    target: Target
    amp_dtype: torch.dtype
    entry: Entry
    numerics: str = "bitwise"

    @property
    def id(self) -> str:
        dtype = devices.dtype_name(self.amp_dtype)
        return f"{self.target.device}-{dtype}-{self.entry.category}-{self.entry.id}"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.entry.id.encode()) & 0x7FFFFFFF

    def skip_reason(self, check: str | None = None) -> str | None:
        entry = self.entry
        gap = entry.version_gap()
        if gap:
            return gap
        name = devices.dtype_name(self.amp_dtype)
        if entry.amp_dtypes is not None and name not in entry.amp_dtypes:
            return f"not applicable: entry {entry.id} is listed for {', '.join(entry.amp_dtypes)} only"
        for skip in entry.skips:
            if skip.applies(self.amp_dtype, self.numerics, self.target.fake, check):
                return skip.reason
        return None

    def build_inputs(self) -> tuple[tuple, dict]:
        builder = argspec.Builder(self.target.device, self.amp_dtype, self.seed)
        args = tuple(builder.build(s) for s in self.entry.args)
        kwargs = {k: builder.build(s) for k, s in self.entry.kwargs.items()}
        return args, kwargs


# -- values --------------------------------------------------------------------------


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v)


def is_eligible(t: torch.Tensor, device: str) -> bool:
    """Autocast's eligibility rule: floating point, not float64, on the autocast device."""
    return t.is_floating_point() and t.dtype != torch.float64 and t.device.type == device


def widest_eligible(values: Any, device: str) -> torch.dtype | None:
    widest = None
    for t in tensors_in(values):
        if is_eligible(t, device):
            widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def promoted_floating(values: Any) -> torch.dtype | None:
    result = None
    for t in tensors_in(values):
        if t.is_floating_point() or t.is_complex():
            result = t.dtype if result is None else torch.promote_types(result, t.dtype)
    return result


def hand_cast(value: Any, dtype: torch.dtype, device: str) -> Any:
    """Cast eligible tensors as autocast would, inside any nesting of lists and tuples."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if is_eligible(value, device) else value
    if isinstance(value, (list, tuple)):
        return type(value)(hand_cast(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: hand_cast(v, dtype, device) for k, v in value.items()}
    return value


def output_dtypes(value: Any) -> list[torch.dtype]:
    return [t.dtype for t in tensors_in(value)]


# -- expectations --------------------------------------------------------------------


def _dtype_for(name: str, case: Case, args: tuple, kwargs: dict) -> torch.dtype | None:
    if name == "amp":
        return case.amp_dtype
    if name == "widest":
        return widest_eligible((args, kwargs), case.target.device)
    if name in ("none", "error"):
        return None
    return argspec.DTYPES[name]


def expected_inside(case: Case, args: tuple, kwargs: dict) -> Any:
    """The output dtype, or a tuple with one dtype per output tensor (mixed outputs)."""
    return _expected(case.entry.expect, case, args, kwargs)


def _expected(names: str | tuple[str, ...], case: Case, args: tuple, kwargs: dict) -> Any:
    if isinstance(names, tuple):  # one per output; a last ... leaves the rest unchecked
        return tuple(... if n == "..." else _dtype_for(n, case, args, kwargs) for n in names)
    return _dtype_for(names, case, args, kwargs)


def expected_outside(case: Case, args: tuple, kwargs: dict) -> Any:
    entry = case.entry
    if entry.expect_outside != "inputs":
        return _expected(entry.expect_outside, case, args, kwargs)
    if entry.policy == "builtin_promote":
        return _dtype_for(entry.expect, case, args, kwargs)
    return promoted_floating((args, kwargs))


def control_dtype(case: Case, args: tuple, kwargs: dict) -> torch.dtype | None:
    return _dtype_for(case.entry.cast, case, args, kwargs) if case.entry.cast != "none" else None


# -- comparison ----------------------------------------------------------------------


def compare(actual: Any, expected: Any, numerics: str, tolerance: Any, what: str) -> None:
    """Bitwise (default) or close comparison of two outputs of any nesting."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise ConformanceFailure(f"{what}: got {type(actual).__name__}, expected a tensor")
        if numerics == "bitwise":
            kwargs = {"rtol": 0.0, "atol": 0.0}
        elif tolerance is not None:
            kwargs = dict(tolerance)
        else:
            kwargs = {}
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True, check_device=True, **kwargs)
        except AssertionError as exc:
            mode = "bitwise" if numerics == "bitwise" else "within tolerance"
            raise ConformanceFailure(f"{what}: not equal ({mode}):\n{exc}") from None
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise ConformanceFailure(f"{what}: got {actual!r}, expected {len(expected)} outputs")
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            compare(a, e, numerics, tolerance, f"{what}[{i}]")
    elif actual != expected:
        raise ConformanceFailure(f"{what}: got {actual!r}, expected {expected!r}")


def compare_meta(actual: Any, expected: Any, what: str) -> None:
    """Without values (fake tensors): outputs agree in structure, dtype and shape."""
    a, e = list(tensors_in(actual)), list(tensors_in(expected))
    if [(t.dtype, tuple(t.shape)) for t in a] != [(t.dtype, tuple(t.shape)) for t in e]:
        raise ConformanceFailure(
            f"{what}: outputs differ: {[(t.dtype, tuple(t.shape)) for t in a]} vs "
            f"{[(t.dtype, tuple(t.shape)) for t in e]}"
        )


# -- messages ------------------------------------------------------------------------


def describe(case: Case) -> str:
    e = case.entry
    return (
        f"{e.qualname} [entry {e.id}, category {e.category}, {e.path}] on {case.target}, "
        f"autocast dtype {case.amp_dtype}"
    )


def _call_source(entry: Entry, variant: str) -> str:
    if variant.startswith("Tensor."):
        return f"args[0].{entry.op}(*args[1:], **kwargs)"
    return f"{variant}(*args, **kwargs)"


def reproduction(case: Case, variant: str, expected: torch.dtype | None, region: str = "inside") -> str:
    e, dev = case.entry, case.target.device
    args = ", ".join(argspec.render(s, dev, case.amp_dtype) for s in e.args)
    kwargs = ", ".join(f"{k!r}: {argspec.render(s, dev, case.amp_dtype)}" for k, s in e.kwargs.items())
    lines = [
        "import torch",
        f"g = torch.Generator().manual_seed({case.seed})",
        f"args = ({args}{',' if len(e.args) == 1 else ''})",
        f"kwargs = {{{kwargs}}}",
    ]
    call = _call_source(e, variant)
    if region == "inside":
        lines.append(f"with torch.autocast({dev!r}, dtype={case.amp_dtype}):")
        lines.append(f"    out = {call}")
    else:
        lines.append(f"out = {call}")
    lines.append(f"print([t.dtype for t in (out if isinstance(out, (tuple, list)) else [out])])"
                 f"  # expected {expected}")
    if case.target.fake:
        lines.insert(0, "# fake: run inside torch._subclasses.fake_tensor.FakeTensorMode("
                        "allow_non_fake_inputs=True), switching the autocast state on with "
                        "torch.set_autocast_enabled/set_autocast_dtype")
    return "\n".join("    " + line for line in lines)


def _fail(case: Case, problems: list[str], variant: str, expected, region="inside") -> None:
    body = "\n".join(f"  {p}" for p in problems)
    raise ConformanceFailure(
        f"{describe(case)}:\n{body}\n  reproduce:\n{reproduction(case, variant, expected, region)}"
    )


def _dtype_problems(name: str, out: Any, expected: Any, where: str) -> list[str]:
    got = output_dtypes(out)
    if isinstance(expected, tuple):
        head = expected[:-1] if expected[-1] is ... else expected
        if tuple(got[:len(head)]) != head or (head is expected and len(got) != len(head)):
            return [f"{name} {where}: output dtypes {got}, expected {list(expected)}"]
        return []
    if expected is None:
        return [] if not got else [f"{name} {where}: returned tensors of {got}, expected no tensor"]
    if not got:
        return [f"{name} {where}: returned {type(out).__name__}, expected a {expected} tensor"]
    if any(d != expected for d in got):
        shown = got[0] if len(got) == 1 else got
        return [f"{name} {where}: output dtype {shown}, expected {expected}"]
    return []


# -- checks --------------------------------------------------------------------------


def _variants(case: Case) -> list[tuple[str, Any]]:
    found = variants(case.entry)
    if not found:
        raise ConformanceFailure(f"{describe(case)}: no callable found for {case.entry.qualname}")
    return found


def check_policy(case: Case, observed: dict | None = None) -> None:
    """Inside autocast: every variant gives the expected dtype and the variants agree.

    ``observed``, when given, receives what each variant did (output dtypes or the error),
    for reports and drift between torch versions, whether the check passes or not.
    """
    observed = {} if observed is None else observed
    dev = case.target.device
    found = _variants(case)
    with unchanged_autocast_state(dev, f"the policy check of {case.entry.qualname}"):
        with case.target.tensors():
            args, kwargs = case.build_inputs()
            if case.entry.policy == "banned":
                _check_banned(case, found, args, kwargs, observed)
                return
            expected = expected_inside(case, args, kwargs)
            outputs = []
            with case.target.autocast(case.amp_dtype):
                if not torch.is_autocast_enabled(dev):
                    _fail(case, ["autocast is not enabled inside the region"], found[0][0], expected)
                for name, fn in found:
                    try:
                        outputs.append((name, fn(*args, **kwargs)))
                    except Exception as exc:  # e.g. a kernel that did not cast: name the op
                        first = str(exc).splitlines()[0] if str(exc) else ""
                        observed[name] = f"error: {first}"
                        _fail(case, [f"{name} raised inside autocast: {type(exc).__name__}: "
                                     f"{first}"], name, expected)
            problems = []
            for name, out in outputs:
                observed[name] = [devices.dtype_name(d) for d in output_dtypes(out)]
                problems += _dtype_problems(name, out, expected, "inside autocast")
            if problems:
                _fail(case, problems, outputs[0][0], expected)
            (first, out0), rest = outputs[0], outputs[1:]
            for name, out in rest:
                what = f"{name} disagrees with {first} inside autocast"
                try:
                    if case.target.has_values:
                        compare(out, out0, case.numerics, case.entry.tolerance, what)
                    else:
                        compare_meta(out, out0, what)
                except ConformanceFailure as exc:
                    _fail(case, [str(exc)], name, expected)


def _check_banned(case: Case, found, args, kwargs, observed: dict) -> None:
    pattern = re.escape(case.entry.error or "")
    for name, fn in found:
        with case.target.autocast(case.amp_dtype):
            try:
                out = fn(*args, **kwargs)
                observed[name] = [devices.dtype_name(d) for d in output_dtypes(out)]
            except RuntimeError as exc:
                observed[name] = f"error: {str(exc).splitlines()[0]}"
                if not re.search(pattern, str(exc)):
                    _fail(case, [f"{name} raised {str(exc).splitlines()[0]!r}, "
                                 f"expected {case.entry.error!r}"], name, None)
            else:
                _fail(case, [f"{name} ran inside autocast; a banned op must raise "
                             f"{case.entry.error!r}"], name, None)
        try:
            fn(*args, **kwargs)
        except RuntimeError as exc:
            _fail(case, [f"{name} raised outside autocast: {exc}"], name, None, region="outside")


def check_numerics(case: Case) -> None:
    """The autocast output equals a control run with autocast off on hand-cast inputs."""
    dev = case.target.device
    name, fn = _variants(case)[0]
    with unchanged_autocast_state(dev, f"the numerics check of {case.entry.qualname}"):
        args, kwargs = case.build_inputs()
        cast_to = control_dtype(case, args, kwargs)
        expected = expected_inside(case, args, kwargs)
        with case.target.autocast(case.amp_dtype):
            out = fn(*args, **kwargs)
            with case.target.autocast(case.amp_dtype, enabled=False):
                if torch.is_autocast_enabled(dev):
                    _fail(case, ["autocast(enabled=False) left autocast enabled"], name, expected)
                if cast_to is None:
                    control = fn(*args, **kwargs)
                else:
                    control = fn(*hand_cast(args, cast_to, dev), **hand_cast(kwargs, cast_to, dev))
            if not torch.is_autocast_enabled(dev):
                _fail(case, ["autocast is off after leaving a nested enabled=False region"],
                      name, expected)
        try:
            compare(out, control, case.numerics, case.entry.tolerance,
                    f"{name} under autocast vs control on inputs cast to {cast_to}")
        except ConformanceFailure as exc:
            _fail(case, [str(exc)], name, expected)


def check_outside(case: Case) -> None:
    """Outside autocast the call runs in its input dtypes, untouched."""
    dev = case.target.device
    found = _variants(case)
    with unchanged_autocast_state(dev, f"the outside check of {case.entry.qualname}"):
        with case.target.tensors():
            args, kwargs = case.build_inputs()
            expected = expected_outside(case, args, kwargs)
            if torch.is_autocast_enabled(dev):
                _fail(case, ["autocast is enabled before any region was entered"], found[0][0],
                      expected, region="outside")
            for name, fn in found:
                if case.entry.expect_outside == "error":
                    _check_raises_outside(case, name, fn, args, kwargs)
                    continue
                out = fn(*args, **kwargs)
                problems = _dtype_problems(name, out, expected, "outside autocast")
                if problems:
                    _fail(case, problems, name, expected, region="outside")
                if case.target.has_values:
                    with case.target.autocast(case.amp_dtype, enabled=False):
                        disabled = fn(*args, **kwargs)
                    try:
                        # bitwise unless the run compares with tolerances (--numerics close,
                        # or a device that declares no bitwise reproducibility)
                        compare(disabled, out, case.numerics, case.entry.tolerance,
                                f"{name} in autocast(enabled=False) vs no region")
                    except ConformanceFailure as exc:
                        _fail(case, [str(exc)], name, expected, region="outside")


def _check_raises_outside(case: Case, name: str, fn, args, kwargs) -> None:
    """The op has no kernel for its (lower-precision) inputs: only autocast makes it run."""
    try:
        fn(*args, **kwargs)
    except (RuntimeError, NotImplementedError):
        return
    _fail(case, [f"{name} ran outside autocast; the op list records that it raises there "
                 "(no kernel for these input dtypes)"], name, None, region="outside")


def check_legacy(case: Case) -> None:
    """torch.<device>.amp.autocast(dtype=...) gives what torch.autocast gives, and warns."""
    dev = case.target.device
    legacy = devices.LEGACY_AUTOCAST[dev]()
    name, fn = _variants(case)[0]
    with unchanged_autocast_state(dev, f"the legacy entry point check of {case.entry.qualname}"):
        args, kwargs = case.build_inputs()
        with case.target.autocast(case.amp_dtype):
            reference = fn(*args, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            region = legacy(dtype=case.amp_dtype)
            with region:
                out = fn(*args, **kwargs)
        if not any(issubclass(w.category, FutureWarning) and "is deprecated" in str(w.message)
                   for w in caught):
            _fail(case, [f"torch.{dev}.amp.autocast(...) emitted no FutureWarning about its "
                         "deprecation"], name, None)
        expected = output_dtypes(reference)
        if output_dtypes(out) != expected:
            _fail(case, [f"{name} under torch.{dev}.amp.autocast(dtype={case.amp_dtype}): output "
                         f"dtype {output_dtypes(out)}, torch.autocast gave {expected}"],
                  name, expected[0] if expected else None)
        try:
            compare(out, reference, case.numerics, case.entry.tolerance,
                    f"{name} under torch.{dev}.amp.autocast vs torch.autocast")
        except ConformanceFailure as exc:
            _fail(case, [str(exc)], name, None)
