"""Failure messages of the wrapper checks: the wrapper, the promise it broke, what was seen,
and a short reproduction to paste (``decl`` standing for the wrapper's declaration)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import torch

from amp_conformance.checks.wrappers.cases import WrapperCase
from amp_conformance.core import devices
from amp_conformance.core.errors import ConformanceFailure

# the promises, as failure messages name them
STATE = "sets the declared autocast state inside its region"
FLOAT32 = "a float32 precision name leaves autocast off"
FLOAT32_ERROR = "a float32 precision name raises"
UNKNOWN = "an unknown precision name behaves as declared"
RESTORED = "restores the autocast state on exit"
RESTORED_EXCEPTION = "restores the autocast state after an exception"
NESTING = "restores the outer region's state on exit when nested"
RUNS_STATE = "runs the user's code in the declared autocast state"
RUNS_NESTED = ("runs the user's code in the declared autocast state inside any region, and "
               "gives the region back after")
DECORATOR = "works as a function decorator"
CACHE = "clears the cast cache at its outermost exit"
POLICY = "applies autocast's op policy inside its region"
CASTS = "casts every floating input to its cast_dtype"
UNCAST = "passes inputs uncast on a device it does not cast on"
INSIDE = "runs the forward in the autocast state it declares"
KWARGS = "consumes its extra keywords"
BACKWARD = "runs backward in the forward's autocast state"
OUTSIDE = "is a no-op outside an enabled region (a disabled one included)"
CONTAINERS = "casts the floating tensors inside lists, tuples and dicts, keeping their type"
UNTOUCHED = "leaves float64, integer and bool tensors and non-tensor arguments untouched"
AFTER = "gives the caller its autocast state back when the forward returns or raises"
GRAD = "lets gradients through the cast to the caller's inputs, in their own dtype"
NEST = ("keeps each region's state when nested inside itself or around torch.autocast, "
        "enabled or disabled")
REUSE = "the same region object entered again after it exits works as the first time"
SINGLE_USE = "a region object declared single-use refuses a second entry"
THREADS = "leaves another thread's autocast state alone"
CACHE_OUTERMOST = "releases the cast cache only at the outermost exit of any nesting"
DECORATOR_RAISES = "restores the autocast state when a decorated function raises"
ISLAND_FLOAT32 = "runs its computation in float32 inside any autocast region"
ISLAND_INPUT = "runs its computation in its input's dtype inside any autocast region"
ISLAND_RETURNS = "returns the dtype it declares"
ISLAND_RESTORED = "gives the caller's region back as it was, on return and on an exception"
ISLAND_NESTING = "stays float32 and gives each region back when nested in regions and islands"
ISLAND_GRAD = "lets gradients through to its inputs and parameters, in their own dtypes"
ISLAND_NUMERICS = "computes what the same float32 computation computes outside autocast"
ISLAND_NUMERICS_INPUT = ("computes what the same computation in its input's dtype computes "
                         "outside autocast")
READS_OTHER = "reads its own device's autocast state, not another device's"
CHANGES_OTHER = "leaves every other device's autocast state alone"
SWAP_STATE = "switches the region it is entered in to its dtype, autocast kept on"
SWAP_RESTORED = "gives the region's state back on exit, on return and on an exception"
SWAP_NESTING = ("keeps each state when nested in itself, around a region, and inside a "
                "disabled region")
SWAP_OUTSIDE = "outside any enabled region does as declared (outside='noop' or 'error')"
PREDICATE = ("answers whether autocast is on for its argument's device, in either amp dtype, "
             "and leaves the state alone")
PREDICATE_NESTED = "answers for the innermost region: a disabled one nested inside says no"
SCALES = "scales the loss it backpropagates: the loss times the scale, in the loss's dtype"
SKIPS = ("skips every step whose gradients hold an inf or a nan, backs off the scale, and "
         "otherwise trains as unscaled training does")
UNSCALE_ONCE = "unscales the gradients once: after unscale_ and clipping, step does not again"
ROUND_TRIP = ("a fresh scaler loading its state_dict() holds the same state and trains on as "
              "the original does")

#: the declaration class each kind of case names in a reproduction
_CLASSES = {"region": "RegionFactory", "runner": "RegionRunner", "forward": "ForwardDecorator",
            "island": "Float32Island", "swap": "RegionSwap", "predicate": "Predicate",
            "scaler": "Scaler"}


def where(case: WrapperCase) -> str:
    text = f"wrapper {case.wrapper.name}"
    if case.wrapper.library:
        text += f" ({case.wrapper.library} {case.wrapper.version})".replace(" )", ")")
    text += f" on {case.device}" + (" (fake)" if case.fake else "")
    if case.kind in ("island", "swap", "predicate", "scaler"):
        text += f", in a {devices.dtype_name(case.amp_dtype)} region"
    if case.precision is not None:
        text += f", precision {case.precision!r} ({devices.dtype_name(case.amp_dtype)})"
    return text


def state_of(device: str) -> str:
    return (f"enabled={torch.is_autocast_enabled(device)}, "
            f"dtype={devices.dtype_name(torch.get_autocast_dtype(device))}")


def fail(case: WrapperCase, promise: str, problems: Sequence[str] | str,
         reproduce: Sequence[str]) -> NoReturn:
    """Raise the ConformanceFailure of a broken promise."""
    problems = [problems] if isinstance(problems, str) else list(problems)
    lines = ["import torch", f"decl = ...  # the {_CLASSES[case.kind]} named {case.wrapper.name!r}",
             *reproduce]
    body = "\n".join(f"  {p}" for p in problems)
    raise ConformanceFailure(f"{where(case)}: broken promise: {promise}\n{body}\n  reproduce:\n"
                             + "\n".join(f"    {line}" for line in lines))
