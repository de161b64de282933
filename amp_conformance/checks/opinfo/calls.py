"""The calls the tier judges: which samples of an OpInfo, in which forms and variants, each
run on its own copy of the sample, and the reproduction a failure prints.

- **Which samples** (``--amp-opinfo-samples``): ``forms`` (the default) the fewest samples
  that show every argument form of the op (:mod:`amp_conformance.checks.opinfo.forms`),
  widened so that each keyword value changes the result in a chosen sample where any
  sample of it does (eager, against the keyword left at its default); ``all``; or the
  first N. Each in float32 and in the autocast dtype where OpInfo says the
  op supports it, each as drawn and as its non-contiguous twin.
- **Variants**: where the OpInfo has them, the first chosen sample of each build is also
  called as a method, in place and with ``out=``. Autocast has no kernel for an in-place or
  ``out=`` overload: PyTorch runs them on the dtypes they are given, and the reference does
  the same (its kernels are the op lists' policy overloads only).
- **Fresh copies**: every run of a call (inside autocast, the control, the eager
  reference, a repeat) gets its own copy of the sample's tensors, strides and storage
  offset kept, so an op that writes an input (embedding's ``max_norm`` renormalises its
  weight in place) cannot make the next run differ.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from amp_conformance.checks.opinfo import forms, source
from amp_conformance.core import devices
from amp_conformance.core.compare import compare, compare_meta
from amp_conformance.core.errors import ConformanceFailure

FUNCTION, METHOD, INPLACE, OUT = "function", "method", "inplace", "out"
#: how --amp-opinfo-samples draws: the default
FORMS, ALL = "forms", "all"


@dataclass(frozen=True)
class Form:
    """One call of the item: the sample's index in its build's draw, the dtype its
    floating tensors were built in, whether it is the non-contiguous twin, and the
    variant it is called as."""

    index: int
    build: torch.dtype
    noncontiguous: bool = False
    variant: str = FUNCTION

    @property
    def label(self) -> str:
        parts = [f"sample{self.index}"]
        if self.build != torch.float32:
            parts.append(devices.dtype_name(self.build))
        if self.noncontiguous:
            parts.append("noncontiguous")
        if self.variant != FUNCTION:
            parts.append(self.variant)
        return "-".join(parts)


def copy_tensor(t: torch.Tensor) -> torch.Tensor:
    """A copy with the same sizes, strides and storage offset (a clone would make a
    non-contiguous operand contiguous); its own storage. A fake tensor has no values to
    keep: a new one of the same layout."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(t, FakeTensor):
        out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    elif t.layout == torch.strided and t.device.type in ("cpu", "cuda"):
        base = t.detach()
        out = base.new_empty(0).set_(base.untyped_storage().clone(), base.storage_offset(),
                                     base.size(), base.stride())
    else:
        out = t.detach().clone()
    return out.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else out


def fresh(sample: Any) -> Any:
    return sample.transform(lambda t: copy_tensor(t) if isinstance(t, torch.Tensor) else t)


def _empty_like(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(torch.empty_like(v) for v in value)
    raise TypeError(f"no out= form for an output of {type(value).__name__}")


@dataclass
class Call:
    """One sample called one way; every call runs on a fresh copy of the sample."""

    sample: Any
    variant: str = FUNCTION
    #: for ``out=``: outputs shaped like the function's outside autocast
    out_like: Any = None

    def __call__(self, op: Any) -> Any:
        s = fresh(self.sample)
        if self.variant == METHOD:
            return op.method_variant(s.input, *s.args, **s.kwargs)
        if self.variant == INPLACE:
            return op.inplace_variant(s.input, *s.args, **s.kwargs)
        if self.variant == OUT:
            out = _empty_like(self.out_like)
            op(s.input, *s.args, **s.kwargs, out=out)
            return out
        return op(s.input, *s.args, **s.kwargs)


def variants(op: Any, fake: bool = False) -> tuple[str, ...]:
    """The variants the OpInfo has beyond its function (fields read defensively: an OpInfo
    of another release without them has none). On a fake device the method only: in-place
    and out= meta kernels skip the checks their real kernels make (a 0-dim self of addr_
    comes back (5, 10) in one run and () in the next, where cpu raises), so they tell
    nothing of a policy."""
    found = [v for v, attr in ((METHOD, "method_variant"), (INPLACE, "inplace_variant"))
             if callable(getattr(op, attr, None))]
    if getattr(op, "supports_out", False):
        found.append(OUT)
    return tuple(v for v in found if v == METHOD or not fake)


@dataclass
class Drawn:
    """One build's draw: the samples (or what drawing raised) and which of them are judged."""

    build: torch.dtype
    samples: list[Any] = field(default_factory=list)
    chosen: forms.Cover | None = None
    error: Exception | None = None


def draw(op: Any, device: str, fake: bool, amp_dtype: torch.dtype, how: int | str
         ) -> list[Drawn]:
    """Every build's samples (drawn whole: forms are counted over all of them) and the
    ones ``how`` judges."""
    where = source.draw_device(device, fake)
    found = []
    for build in source.builds(op, device, amp_dtype):
        try:
            samples = source.draw(op, where, build, None)
        except Exception as exc:  # noqa: BLE001 - reported per form, never hidden
            found.append(Drawn(build, error=exc))
            continue
        if how == FORMS:
            chosen = _shown(op, samples, where, build, fake)
        else:
            chosen = forms.first(samples, build, None if how == ALL else int(how))
        found.append(Drawn(build, samples, chosen))
    return found


#: each OpInfo's widened cover per (draw device, build, fake): the float32 build is drawn
#: again for every amp dtype, and its samples are the same (seeded)
_COVERS: dict[tuple[str, str, str, torch.dtype, bool], forms.Cover] = {}


def _shown(op: Any, samples: list[Any], where: str, build: torch.dtype, fake: bool
           ) -> forms.Cover:
    key = (op.name, getattr(op, "variant_test_name", ""), where, build, fake)
    if key not in _COVERS:
        _COVERS[key] = forms.show_keywords(samples, build, forms.cover(samples, build),
                                           keyword_changes(op, samples, where, fake))
    return _COVERS[key]


def keyword_changes(op: Any, samples: list[Any], where: str, fake: bool
                    ) -> Callable[[int, str], bool | None]:
    """Whether sample i's result, eager and seeded, differs from its result with keyword
    ``key`` left at its default (dtypes and shapes alone on fake tensors): False where the
    sample raises, None where only the call without the keyword does (it has no default).
    The calls run on the host (a copy of a sample drawn on a real device): a call without
    its keyword may index out of range (nll_loss's target at its ignore_index), which a GPU
    answers with a device assert that ends the process's device context. The sample's own
    result is computed once."""
    given: dict[int, Any] = {}

    def run(sample: Any) -> Any:
        with source.seeded("cpu"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return Call(sample)(op)
            except Exception as exc:  # noqa: BLE001 - a call that raises shows no effect
                return exc

    def changes(i: int, key: str) -> bool:
        sample = samples[i] if where == "cpu" else source.to_device(samples[i], "cpu")
        if i not in given:
            given[i] = run(sample)
        if isinstance(given[i], Exception):
            return False
        without = copy.copy(sample)
        without.kwargs = {k: v for k, v in sample.kwargs.items() if k != key}
        default = run(without)
        if isinstance(default, Exception):
            return None
        try:
            if fake:
                compare_meta(given[i], default, key)
            else:
                compare(given[i], default, "bitwise", None, key)
        except ConformanceFailure:
            return True
        return False
    return changes


def calls(op: Any, device: str, fake: bool, drawn: list[Drawn]
          ) -> Iterator[tuple[Form, Call | Exception]]:
    """Every call to judge: (form, call or the exception that building it raised). Call
    inside the target's tensor context (FakeTensorMode)."""
    where = source.draw_device(device, fake)
    place = (None if where == device else
             (lambda s: source.to_fake_device(s, device)) if fake
             else (lambda s: source.to_device(s, device)))
    for d in drawn:
        if d.error is not None:
            yield Form(0, d.build), d.error
            continue
        for index in d.chosen.indices:
            # a sample added for a keyword's value shows no new layout: no twin
            for noncontiguous in (False,) if index in d.chosen.redrawn else (False, True):
                form = Form(index, d.build, noncontiguous)
                try:
                    twin = source.twins(d.samples[index], form.noncontiguous)
                    yield form, Call(twin if place is None else place(twin))
                except Exception as exc:  # noqa: BLE001 - reported per form
                    yield form, exc
        if d.chosen.indices:
            yield from _variant_calls(op, d, place, fake)


def _variant_calls(op: Any, d: Drawn, place: Any, fake: bool
                   ) -> Iterator[tuple[Form, Call | Exception]]:
    """The first chosen sample of the build, called as each variant the OpInfo has."""
    index = d.chosen.indices[0]
    for variant in variants(op, fake):
        form = Form(index, d.build, variant=variant)
        try:
            sample = d.samples[index] if place is None else place(d.samples[index])
            out_like = Call(sample)(op) if variant == OUT else None
            yield form, Call(sample, variant, out_like)
        except Exception as exc:  # noqa: BLE001 - reported per form
            yield form, exc


def counts(drawn: list[Drawn]) -> dict[str, int]:
    """What the report says of the draw: samples and forms available, how many of each
    the judged samples show."""
    covers = [d.chosen for d in drawn if d.chosen is not None]
    return {"samples": sum(c.samples for c in covers),
            "samples_drawn": sum(len(c.indices) for c in covers),
            "forms": sum(c.forms for c in covers),
            "forms_drawn": sum(c.shown for c in covers),
            "forms_redrawn": sum(len(c.redrawn) for c in covers)}


_COPY = ("copy = lambda t: t.new_empty(0).set_(t.untyped_storage().clone(), t.storage_offset(), "
         "t.size(), t.stride()).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) "
         "and t.layout == torch.strided else t\n"
         "fresh = lambda: sample.transform(copy)  # each run on its own copy, strides kept\n")


def _call_line(variant: str) -> str:
    if variant == METHOD:
        return "op.method_variant(s.input, *s.args, **s.kwargs)"
    if variant == INPLACE:
        return "op.inplace_variant(s.input, *s.args, **s.kwargs)"
    if variant == OUT:
        return "out_call(s)"
    return "op(s.input, *s.args, **s.kwargs)"


def reproduction(ref: source.OpRef, form: Form, device: str, fake: bool,
                 amp_dtype: torch.dtype) -> str:
    """Python that rebuilds the sample and runs it inside and outside autocast, each run on
    its own copy."""
    dtype = devices.dtype_name(amp_dtype)
    where = source.draw_device(device, fake)
    twin = ".noncontiguous()" if form.noncontiguous else ""
    ran = f"a fake {device}" if fake else device
    moved = (f"  # drawn on {where}; the suite ran it on {ran}: run this where "
             f"{device} is\nsample = sample.transform(lambda t: t.to({device!r}) if "
             "isinstance(t, torch.Tensor) else t)\n") if where != device else ""
    out = ("s = fresh()\nlike = op(s.input, *s.args, **s.kwargs)  # out= is shaped like the "
           "function's output outside autocast\n"
           "def out_call(s):\n"
           "    o = torch.empty_like(like) if isinstance(like, torch.Tensor) else "
           "tuple(map(torch.empty_like, like))\n"
           "    op(s.input, *s.args, **s.kwargs, out=o)\n"
           "    return o\n") if form.variant == OUT else ""
    line = _call_line(form.variant)
    return (
        "import itertools, random, torch\n"
        f"from {source.MODULE} import op_db\n"
        f"op = next(o for o in op_db if (o.name, o.variant_test_name) == {(ref.name, ref.variant)!r})\n"
        f"torch.manual_seed({source.SEED}); random.seed({source.SEED})\n"
        f"samples = op.sample_inputs_func(op, {where!r}, torch.{devices.dtype_name(form.build)}, False)\n"
        f"sample = next(itertools.islice(samples, {form.index}, None)){twin}\n"
        f"{moved}{_COPY}{out}"
        f"with torch.autocast({device!r}, dtype=torch.{dtype}):\n"
        f"    s = fresh()\n    inside = {line}\n"
        f"s = fresh()\noutside = {line}\n"
        "print(inside, outside, sep='\\n')\n"
    )
