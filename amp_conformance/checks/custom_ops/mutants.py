"""Mutants of a custom op's autocast rule: the registration refused for the device (as
releases before pytorch PR #183689 refused every device but cpu and cuda), the rule's cast
doing nothing, casting float64 too, rounding twice or cutting the gradient, and the
dispatcher never reaching a custom op's Autocast<Device> kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._library import custom_ops

from amp_conformance.checks.mutation import Mutant, Undo, fake_mutant, patch, patches, register


def _refuses(original: Callable) -> Callable:
    """``register_autocast`` as it was before PR #183689, refusing the device under test."""
    @functools.wraps(original)
    def register_autocast(*args: Any, **kwargs: Any) -> Any:
        # (op, device_type, cast_inputs) and (self, device_type, cast_inputs) alike
        device_type = args[1] if len(args) > 1 else kwargs.get("device_type")
        raise ValueError(f"Unknown device type: {device_type}")
    return register_autocast


def _on_cast(make: Callable[[Callable], Callable]) -> Callable[[], Undo]:
    """Patch the cast of torch's custom-op autocast rule, where both registrations read it."""
    return patches(patch(custom_ops, "_cast", make), patch(torch.library, "_cast", make))


def _casts_nothing(original: Callable) -> Callable:
    return lambda value, device_type, dtype: value


def _casts_float64(original: Callable) -> Callable:
    def _cast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        return original(value, device_type, dtype)
    return _cast


def _casts_through_other(original: Callable) -> Callable:
    """The right dtype, reached through the other lower-precision one (rounded twice)."""
    def _cast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        cast = original(value, device_type, dtype)
        if cast is value or dtype not in (torch.float16, torch.bfloat16):
            return cast
        through = torch.bfloat16 if dtype == torch.float16 else torch.float16
        return value.to(through).to(dtype)
    return _cast


def _cast_detached(original: Callable) -> Callable:
    def _cast(value: Any, device_type: str, dtype: torch.dtype) -> Any:
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        cast = original(value, device_type, dtype)
        return cast.detach() if cast is not value else cast
    return _cast


def _autocast_kernels_dropped(original: Callable) -> Callable:
    """``Library.impl`` of a kernel at an Autocast key, for an op outside aten, registers
    nothing (a dispatcher that never reaches a custom op's autocast kernel)."""
    @functools.wraps(original)
    def impl(self: torch.library.Library, op_name: Any, fn: Any, dispatch_key: str = "",
             *args: Any, **kwargs: Any) -> Any:
        if self.ns != "aten" and str(dispatch_key).startswith("Autocast"):
            return None
        return original(self, op_name, fn, dispatch_key, *args, **kwargs)
    return impl


register(Mutant(
    name="custom_ops-register_autocast-refuses-device",
    description="torch.library.register_autocast and CustomOpDef.register_autocast refuse "
                "the device with ValueError: Unknown device type (before pytorch PR #183689 "
                "they refused all but cpu and cuda)",
    apply=patches(patch(torch.library, "register_autocast", _refuses),
                  patch(custom_ops.CustomOpDef, "register_autocast", _refuses)),
    expect=("torch refused to register the rule", "ValueError: Unknown device type: cpu"),
    select="test_custom_op_autocast",
))
register(Mutant(
    name="custom_ops-rule-casts-nothing",
    description="a custom op's register_autocast rule casts none of its inputs",
    apply=_on_cast(_casts_nothing),
    expect=("rule to_amp: the op received (a float32", "the rule gives"),
    select="test_custom_op_autocast",
))
register(Mutant(
    name="custom_ops-rule-casts-float64",
    description="a custom op's register_autocast rule casts float64 inputs too",
    apply=_on_cast(_casts_float64),
    expect=("rule to_float32: the op received", "d float32"),
    select="test_custom_op_autocast",
))
register(Mutant(
    name="custom_ops-rule-casts-through-other-dtype",
    description="a custom op's register_autocast rule reaches the cast dtype through the "
                "other lower-precision one: the dtypes are right, the values rounded twice",
    apply=_on_cast(_casts_through_other),
    expect="rule to_amp: output vs the hand-cast control",
    select="test_custom_op_autocast",
))
register(Mutant(
    name="custom_ops-rule-cuts-gradient",
    description="a custom op's register_autocast rule casts its inputs detached: no gradient "
                "reaches them",
    apply=_on_cast(_cast_detached),
    expect="rule to_float32: no gradient reached b",
    select="test_custom_op_backward",
))
register(Mutant(
    name="custom_ops-autocast-kernel-unreached",
    description="a kernel registered at Autocast<Device> for a custom op is never reached "
                "(every route's rule, register_autocast's included, is lost)",
    apply=patch(torch.library.Library, "impl", _autocast_kernels_dropped),
    expect=("Library.impl", "rule to_amp: the op received (a float32"),
    select="test_custom_op_autocast and Library.impl",
))
fake_mutant(
    name="cuda-custom_ops-rule-casts-nothing",
    description="a custom op's register_autocast rule for cuda casts none of its inputs "
                "(fake cuda tensors, no GPU)",
    apply=_on_cast(_casts_nothing),
    expect=("on cuda (fake)", "rule to_amp: the op received (a float32"),
    select="test_custom_op_autocast",
)
