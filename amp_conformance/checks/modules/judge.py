"""One module in one mode, judged: the device's autocast against the reference autocast.

Each of the six modes (train or eval; with grad, under ``torch.no_grad()``, under
``torch.inference_mode()``) runs the subject twice from the same seed:

- **inside** the device's autocast, as a user runs it, fused paths allowed;
- the **control**: autocast off, the module's computation through the reference autocast
  (:mod:`amp_conformance.checks.reference`: each op it calls cast where the device's op
  lists say), with ``torch.backends.mha``'s fast paths off. A fused path is an
  optimisation of that computation and must give its dtypes; autocast's contract is the
  computation's, op by op. PyTorch turns its fast paths off under autocast for this reason.

With grad, a weighted float32 sum of the floating outputs is differentiated outside the
region with respect to the floating inputs and parameters. Outputs and gradients must have
the control's dtypes exactly, and its values within the autocast dtype's precision at the
output's scale (a value crosses several lower-precision ops, and the cast cache sums a
parameter's gradient in the amp dtype), bitwise where the control cast nothing (a module
the policy leaves alone gives eager's result). On a fake device, dtypes and shapes only,
and no backward. Which fused path each run took is recorded (:data:`FAST_PATHS`).

How a mode ended: ``agrees``; ``capability`` (both raise the same error: the policy's cast
reaches a kernel the device lacks in that dtype); ``defect`` (the device does what a
recorded PyTorch defect does today: a fast path taken under autocast, matched by the same
path through the reference autocast); ``n/a`` (it fails outside autocast too); ``failed``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from amp_conformance.checks.modules.source import Subject
from amp_conformance.checks.reference import PolicyTable, ReferenceBanned, casting
from amp_conformance.core import devices, dispatch, rng
from amp_conformance.core.casting import output_dtypes, settle, tensors_in
from amp_conformance.core.compare import close
from amp_conformance.core.errors import describe_error, first_line
from amp_conformance.core.target import Target, fake_runtime
from amp_conformance.schema.defects import registry as defect_registry

AGREES, CAPABILITY, DEFECT, NOT_APPLICABLE, FAILED = (
    "agrees", "capability", "defect", "n/a", "failed")
OUTCOMES = (AGREES, CAPABILITY, DEFECT, NOT_APPLICABLE, FAILED)
INSIDE, CONTROL, TODAY, EAGER, PLAIN = "inside", "control", "today", "eager", "plain"

#: the fused kernels modules take instead of their computation, each with the PyTorch
#: defect that takes it under autocast today (oplists/defects.toml)
FAST_PATHS = {"aten::_transformer_encoder_layer_fwd": "fastpath-under-autocast-off-cuda",
              "aten::_native_multi_head_attention": "fastpath-under-autocast-off-cuda"}
#: a value's error after the lower-precision ops it crosses, in eps of the autocast dtype
#: at the output's scale (observed on module_db's modules on CPU: under 1 eps of bfloat16)
ULPS = 4
_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2}


@dataclass(frozen=True)
class Mode:
    training: bool
    grad: str  # "grad", "no_grad" or "inference_mode"

    @property
    def label(self) -> str:
        return f"{'train' if self.training else 'eval'}/{self.grad}"

    def context(self) -> contextlib.AbstractContextManager:
        return {"grad": torch.enable_grad, "no_grad": torch.no_grad,
                "inference_mode": torch.inference_mode}[self.grad]()


MODES = tuple(Mode(t, g) for t in (True, False) for g in ("grad", "no_grad", "inference_mode"))


@dataclass(frozen=True)
class Setting:
    subject: Subject
    target: Target
    amp_dtype: torch.dtype
    table: PolicyTable
    numerics: str = "bitwise"


@dataclass
class Run:
    """One run: its outputs and gradients (name -> tensor), or the error; the fused paths
    it took and the overloads the reference cast at."""

    out: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    error: BaseException | None = None
    paths: list[str] = field(default_factory=list)
    cast_at: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Verdict:
    mode: Mode
    outcome: str
    detail: str = ""
    paths: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    defect: str | None = None


@contextlib.contextmanager
def fast_paths_off() -> Iterator[None]:
    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def run(s: Setting, mode: Mode, how: str) -> Run:
    """The subject in ``mode``: ``INSIDE`` the device's autocast, the ``CONTROL``, the
    control with fast paths on (``TODAY``: what PyTorch does where it takes them),
    ``EAGER`` (the control's computation with nothing cast), or ``PLAIN`` (the user's call
    without autocast, fast paths on)."""
    found = Run()
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(rng.seeded("cpu" if s.target.fake else s.target.device,
                                       s.subject.seed))
        built = s.subject.build(s.target, s.amp_dtype, grad=mode.grad == "grad")
        built.module.train(mode.training)
        try:
            with contextlib.ExitStack() as region:
                region.enter_context(mode.context())
                found.paths = region.enter_context(dispatch.calls_of(tuple(FAST_PATHS)))
                if how == INSIDE:
                    region.enter_context(s.target.autocast(s.amp_dtype))
                if how in (CONTROL, EAGER):
                    region.enter_context(fast_paths_off())
                if how in (CONTROL, TODAY):
                    found.cast_at = region.enter_context(casting(s.table))
                found.out = settle(built.module(*built.args, **built.kwargs))
            if mode.grad == "grad" and not s.target.fake:
                found.grads = _gradients(built, found.out)
        except Exception as exc:  # noqa: BLE001 - every error is judged, none hidden
            found.error = exc
    return found


def _gradients(built: Any, out: Any) -> dict[str, torch.Tensor | None]:
    """d(weighted float32 sum of the floating outputs) / d(floating inputs, parameters);
    the weights (a ramp from -1 to 1) keep a softmax's or a normalization's gradient from
    vanishing."""
    floats = [t for t in tensors_in(out) if t.is_floating_point() and t.requires_grad]
    leaves = {f"input {i}": t for i, t in enumerate(tensors_in((built.args, built.kwargs)))
              if t.requires_grad}
    leaves.update({n: p for n, p in built.module.named_parameters() if p.requires_grad})
    if not floats or not leaves:
        return {}
    loss = sum((t.float() * torch.linspace(-1.0, 1.0, t.numel(), device=t.device)
                .reshape(t.shape)).sum() for t in floats)
    found = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return dict(zip(leaves, found, strict=True))


def tolerance(expected: torch.Tensor, amp_dtype: torch.dtype) -> dict[str, float]:
    """The autocast dtype's precision at the output's scale: rtol its assert_close default,
    atol :data:`ULPS` eps of it times the output's largest magnitude (at least 1e-5)."""
    if expected.numel() == 0 or not expected.is_floating_point():
        return {"rtol": 0.0, "atol": 0.0}
    magnitude = float(expected.detach().float().abs().nan_to_num(0.0, 0.0, 0.0).max())
    atol = ULPS * torch.finfo(amp_dtype).eps * magnitude
    return {"rtol": _RTOL[amp_dtype], "atol": max(1e-5, atol)}


def _pairs(a: Run, c: Run) -> list[tuple[str, Any, Any]]:
    outs = [(f"output {i}", x, y) for i, (x, y) in
            enumerate(zip(tensors_in(a.out), tensors_in(c.out), strict=False))]
    return outs + [(f"gradient of {k}", a.grads.get(k), g) for k, g in c.grads.items()]


def _names(value: Any) -> tuple[str, ...]:
    return tuple(devices.dtype_name(d) for d in output_dtypes(value))


def differs(s: Setting, a: Run, c: Run) -> str | None:
    """How the run inside autocast departs from the control, or None."""
    if len(list(tensors_in(a.out))) != len(list(tensors_in(c.out))):
        return f"outputs {_names(a.out)}, the control's {_names(c.out)}"
    if set(a.grads) != set(c.grads):
        return f"gradients of {sorted(a.grads)}, the control's of {sorted(c.grads)}"
    bitwise = not c.cast_at and s.numerics == "bitwise"
    for what, x, y in _pairs(a, c):
        if (x is None) != (y is None):
            return f"{what}: {'none' if x is None else 'one'}, the control's {'none' if y is None else 'one'}"
        if x is None:
            continue
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{what}: {devices.dtype_name(x.dtype)} {tuple(x.shape)}, the control's " \
                   f"{devices.dtype_name(y.dtype)} {tuple(y.shape)}"
        if s.target.fake:  # no values
            continue
        rule = {"rtol": 0.0, "atol": 0.0} if bitwise else tolerance(y, s.amp_dtype)
        why = close(x, y, **rule, equal_nan=True)
        if why is not None:
            said = " ".join(line.strip() for line in why.splitlines()[:3] if line.strip())
            return f"{what} ({devices.dtype_name(x.dtype)}): {said}"
    return None


def judge(s: Setting, mode: Mode) -> Verdict:
    """One mode: inside the device's autocast, against the control."""
    a, c = run(s, mode, INSIDE), run(s, mode, CONTROL)
    base = dict(mode=mode, paths=tuple(dict.fromkeys(a.paths)),
                dtypes=_names(a.out) if a.ok else ())
    if a.ok and c.ok:
        why = differs(s, a, c)
        return Verdict(outcome=AGREES, **base) if why is None else \
            _departs(s, mode, a, f"{_where(a, c)}: {why}", base)
    if isinstance(c.error, ReferenceBanned):
        return _banned(a, c, base)
    limit = _fake_limit(s, mode, a, c)
    if limit is not None:
        return Verdict(outcome=NOT_APPLICABLE, **base, detail=limit)
    if not a.ok and not c.ok and _same(a.error, c.error):
        eager = run(s, mode, EAGER)
        if not eager.ok:
            return Verdict(outcome=NOT_APPLICABLE, **base, detail=f"fails outside autocast "
                           f"too: {describe_error(eager.error, 160)}")
        return Verdict(outcome=CAPABILITY, **base, detail=f"the policy's cast reaches a "
                       f"kernel that raises {describe_error(a.error, 160)}")
    if not a.ok and not c.ok:
        detail = (f"inside autocast {describe_error(a.error, 160)}; the control "
                  f"{describe_error(c.error, 160)}")
    elif not a.ok:
        detail = f"works outside autocast, raises inside: {describe_error(a.error, 200)}"
    else:
        cast = ", ".join(dict.fromkeys(c.cast_at)) or "no overload"
        detail = (f"runs inside autocast ({_where(a, c)}), but the declared policy's control "
                  f"(cast at {cast}) raises {describe_error(c.error, 160)}")
    verdict = _departs(s, mode, a, detail, base)
    failed = c if a.ok else a  # the run that raised where the other did not
    if verdict.outcome == FAILED and (a.ok or c.ok):
        eager = run(s, mode, EAGER)
        if not eager.ok and _same(eager.error, failed.error):
            return Verdict(outcome=NOT_APPLICABLE, **base, detail=f"the module's computation "
                           f"fails outside autocast too: {describe_error(eager.error, 160)}")
    return verdict


def _same(one: BaseException, other: BaseException) -> bool:
    return type(one) is type(other) and first_line(one) == first_line(other)


def _fake_limit(s: Setting, mode: Mode, *runs: Run) -> str | None:
    """Why a fake device cannot run the module, or None: every run that failed, and the
    module without autocast (its computation, or the call as a user makes it, fused paths
    on), fail for what the fake device lacks (its runtime, a fake kernel)."""
    errors = [r.error for r in runs if not r.ok]
    if not errors or not all(fake_runtime(s.target, e) for e in errors):
        return None
    for how in (EAGER, PLAIN):
        outside = run(s, mode, how)
        if not outside.ok and fake_runtime(s.target, outside.error):
            return (f"not applicable in --fake mode: it fails outside autocast too, the fake "
                    f"device cannot run it: {describe_error(outside.error, 160)}")
    return None


def _banned(a: Run, c: Run, base: dict) -> Verdict:
    """The op lists ban an op the module calls: autocast must raise the ban's error."""
    expected = first_line(c.error, 120)
    if a.ok:
        return Verdict(outcome=FAILED, **base, detail=f"the op lists ban an op it calls under "
                       f"autocast ({expected}) but it ran")
    if str(c.error) in str(a.error):
        return Verdict(outcome=AGREES, **base, detail="banned: raised its error")
    return Verdict(outcome=FAILED, **base, detail=f"banned, but raised "
                   f"{describe_error(a.error, 160)} instead of {expected}")


def _where(a: Run, c: Run) -> str:
    path = f"took {', '.join(dict.fromkeys(a.paths))}" if a.paths else "took no fused path"
    cast = f"cast at {len(set(c.cast_at))} overloads" if c.cast_at else "cast nothing"
    return f"inside autocast it {path}; the control {cast}"


def _departs(s: Setting, mode: Mode, a: Run, detail: str, base: dict) -> Verdict:
    """A departure, or the defect PyTorch shows today where a fast path was taken inside
    autocast and the same path through the reference autocast does the same."""
    for path in dict.fromkeys(a.paths):
        defect = defect_registry()[FAST_PATHS[path]]
        if not defect.applies():
            continue
        today = run(s, mode, TODAY)
        same = (today.ok and a.ok and differs(s, a, today) is None) or (
            not today.ok and not a.ok and _same(today.error, a.error))
        if same:
            return Verdict(outcome=DEFECT, defect=defect.id, **base,
                           detail=f"reproduces {defect.id}: {detail}")
    return Verdict(outcome=FAILED, **base, detail=detail)
