"""The custom_ops checks: a custom op given an autocast rule for the device under test, by
each route of :mod:`.ops`, is held to its declared cast.

Two rules per item, one op each: cast to the amp dtype (``to_amp``) and to float32
(``to_float32``). The op gets a float32 tensor and one of the device's other lower-precision
dtype, so each rule changes one of them; the float64, integer and other-device tensors
beside them must arrive untouched. Forward: the dtypes the op received and returned, and
its output against the op called with autocast off on inputs cast by hand (values where the
device has them). Backward: each input's gradient in its own dtype, equal to the hand-cast
control's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from amp_conformance.checks.custom_ops import ops
from amp_conformance.checks.custom_ops.ops import Route
from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast
from amp_conformance.core.compare import compare
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import Target
from amp_conformance.schema.argspec import other_device

NAMES = ("a", "b", "d", "i", "o")


def casts(amp_dtype: torch.dtype) -> dict[str, torch.dtype]:
    """The declared rules, by label: to the amp dtype, and to float32."""
    return {"to_amp": amp_dtype, "to_float32": torch.float32}


def _second_dtype(target: Target, amp_dtype: torch.dtype) -> torch.dtype:
    """The device's other lower-precision dtype (its amp dtype where it has only one)."""
    others = [d for d in devices.supported_amp_dtypes(target.device, target.fake)
              if d != amp_dtype]
    return others[0] if others else amp_dtype


def inputs(target: Target, amp_dtype: torch.dtype) -> tuple[torch.Tensor | None, ...]:
    """(a, b, d, i, o): float32 and lower-precision matrices, then float64, int64 and,
    off cpu, a cpu float32 vector (on cpu no other device can enter its kernels: None).
    Made inside ``target.tensors()``."""
    device = target.device
    generator = torch.Generator().manual_seed(0)

    def make(shape: tuple[int, ...], dtype: torch.dtype, on: str = device) -> torch.Tensor:
        if target.fake:
            return torch.randn(shape, device=on).to(dtype)
        return torch.randn(shape, generator=generator).to(dtype).to(on)

    other = other_device(device)
    return (make((8, 8), torch.float32), make((8, 8), _second_dtype(target, amp_dtype)),
            make((4,), torch.float64), make((4,), torch.int64),
            None if device == "cpu" else make((4,), torch.float32, other))


def _expected(args: tuple[torch.Tensor | None, ...], cast: torch.dtype, device: str
              ) -> tuple[torch.dtype | None, ...]:
    return ops.dtypes_of(*hand_cast(args, cast, device))


def _show(dtypes: tuple[torch.dtype | None, ...]) -> str:
    return ", ".join(f"{n} {str(d).removeprefix('torch.')}" for n, d in zip(NAMES, dtypes,
                                                                            strict=True)
                     if d is not None)


def _where(route: Route, target: Target, amp_dtype: torch.dtype) -> str:
    return (f"custom_ops: a custom op given its autocast rule by {route.name} ({route.how}) "
            f"on {target}, autocast dtype {amp_dtype}")


@contextlib.contextmanager
def _registered(route: Route, target: Target, amp_dtype: torch.dtype
                ) -> Iterator[dict[str, ops.Op]]:
    """The item's ops with their rules; a refused registration is the item's failure,
    quoting what torch raised, or on a release before the route's (:class:`ops.Unavailable`)
    its proof of not applying."""
    try:
        with ops.registered(route, target.device, casts(amp_dtype)) as registered:
            yield registered
    except ops.Refused as exc:
        gap = route.version_gap(target.device)
        if gap:
            raise ops.Unavailable(f"{gap}; registering raised "
                                  f"{describe_error(exc.__cause__)}") from exc.__cause__
        raise ConformanceFailure(
            f"{_where(route, target, amp_dtype)}: torch refused to register the rule for "
            f"{target.device!r}: {describe_error(exc.__cause__)} (from torch 2.13 on it "
            "registers one for every device type torch.autocast supports)") from exc.__cause__


def _call(op: ops.Op, args: tuple, what: str) -> torch.Tensor:
    try:
        return op(*args)
    except Exception as exc:  # the device's or the rule's error is the item's failure
        raise ConformanceFailure(f"{what}: the call raised {describe_error(exc, 300)}") from exc


def check_forward(target: Target, route: Route, amp_dtype: torch.dtype,
                  numerics: str = "bitwise") -> None:
    """Inside an autocast region each op receives its rule's dtypes and returns the cast
    dtype; with values, its output equals the op called with autocast off on inputs cast
    by hand."""
    device, problems = target.device, []
    where = _where(route, target, amp_dtype)
    with unchanged_autocast_state(device, "the check"), target.tensors(), \
            _registered(route, target, amp_dtype) as registered:
        args = inputs(target, amp_dtype)
        for label, cast in casts(amp_dtype).items():
            what = f"{where}, rule {label} (cast_inputs={cast})"
            before = len(problems)
            ops.SEEN.clear()
            with target.autocast(amp_dtype):
                out = _call(registered[label], args, what)
            seen, expected = list(ops.SEEN), _expected(args, cast, device)
            if not seen:
                problems.append(f"rule {label}: no kernel of the op ran")
            elif seen[0] != expected:
                problems.append(f"rule {label}: the op received ({_show(seen[0])}), the "
                                f"rule gives ({_show(expected)})")
            if out.dtype != cast:
                problems.append(f"rule {label}: the op returned {out.dtype}, expected {cast}")
            if target.has_values and len(problems) == before:
                control = _call(registered[label], hand_cast(args, cast, device),
                                f"{what}, the hand-cast control")
                try:
                    compare(out, control, numerics, None, f"rule {label}: output vs the "
                            "hand-cast control")
                except ConformanceFailure as exc:
                    problems.append(str(exc))
    if problems:
        raise ConformanceFailure(f"{where}:\n" + "\n".join(f"  {p}" for p in problems))


def check_backward(target: Target, route: Route, amp_dtype: torch.dtype,
                   numerics: str = "bitwise") -> None:
    """Backward (outside the region) reaches a and b in their own dtypes, with the hand-cast
    control's gradients."""
    device, problems = target.device, []
    where = _where(route, target, amp_dtype)
    with unchanged_autocast_state(device, "the check"), \
            _registered(route, target, amp_dtype) as registered:
        for label, cast in casts(amp_dtype).items():
            what = f"{where}, rule {label} (cast_inputs={cast}), backward"
            a, b, *rest = inputs(target, amp_dtype)
            leaves = [a.requires_grad_(), b.requires_grad_()]
            controls = [t.detach().clone().requires_grad_() for t in leaves]
            with target.autocast(amp_dtype):
                out = _call(registered[label], (*leaves, *rest), what)
            control = _call(registered[label], hand_cast((*controls, *rest), cast, device),
                            f"{what}, the hand-cast control")
            try:
                out.float().sum().backward()
                control.float().sum().backward()
            except Exception as exc:  # noqa: BLE001 - the item's failure
                problems.append(f"rule {label}: backward raised {describe_error(exc, 300)}")
                continue
            for name, leaf, twin in zip(NAMES, leaves, controls, strict=False):
                if leaf.grad is None:
                    problems.append(f"rule {label}: no gradient reached {name}")
                elif leaf.grad.dtype != leaf.dtype:
                    problems.append(f"rule {label}: {name}'s gradient is {leaf.grad.dtype}, "
                                    f"{name} is {leaf.dtype}")
                else:
                    try:
                        compare(leaf.grad, twin.grad, numerics, None,
                                f"rule {label}: {name}'s gradient vs the hand-cast control's")
                    except ConformanceFailure as exc:
                        problems.append(str(exc))
    if problems:
        raise ConformanceFailure(f"{where}:\n" + "\n".join(f"  {p}" for p in problems))
