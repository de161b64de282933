"""The compile_regions scenarios' bodies: functions with autocast regions, each built
for an :class:`Env` and returning its tensors and the autocast state it observed inside."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.core.devices import legacy_autocast
from amp_conformance.core.target import Target

Body = Callable[[torch.Tensor], Any]


@dataclass(frozen=True)
class Env:
    """What a scenario's body is built from: the target, the amp dtype under test and
    another amp dtype of the device (None where it supports only one)."""

    target: Target
    dtype: torch.dtype
    other: torch.dtype | None

    @property
    def device(self) -> str:
        return self.target.device

    def dtype_of(self, which: str | None) -> torch.dtype | None:
        """``"amp"``, ``"other"``, or the device's current autocast dtype (None)."""
        return {"amp": self.dtype, "other": self.other, None: None}[which]

    def region(self, which: str | None = "amp", enabled: bool = True,
               cache_enabled: bool | None = None) -> torch.autocast:
        """A ``torch.autocast`` region of the device, for use inside compiled code."""
        return torch.autocast(self.device, dtype=self.dtype_of(which), enabled=enabled,
                              cache_enabled=cache_enabled)


def observe(device: str) -> tuple[bool, torch.dtype, bool]:
    """The autocast state as code inside the region sees it (dynamo traces these reads)."""
    return (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device),
            torch.is_autocast_cache_enabled())


def inner(env: Env) -> Body:
    def body(x):
        with env.region():
            return torch.mm(x, x), observe(env.device)
    return body


def inner_no_cache(env: Env) -> Body:
    def body(x):
        with env.region(cache_enabled=False):
            return torch.mm(x, x), observe(env.device)
    return body


def inner_default_dtype(env: Env) -> Body:
    def body(x):
        with torch.autocast(env.device):
            return torch.mm(x, x), observe(env.device)
    return body


def plain(env: Env) -> Body:
    def body(x):
        return torch.mm(x, x), torch.softmax(x, 0), observe(env.device)
    return body


def disabled_inner(env: Env) -> Body:
    def body(x):
        a = torch.mm(x, x)
        with env.region(enabled=False):
            b = torch.mm(x, x), observe(env.device)
        return a, b, torch.mm(x, x), observe(env.device)
    return body


def decorated(env: Env) -> Body:
    @env.region()
    def body(x):
        return torch.mm(x, x), observe(env.device)
    return body


def disabled_subregion(env: Env) -> Body:
    def body(x):
        with env.region():
            a = torch.mm(x, x)
            with env.region(enabled=False):
                b = torch.mm(x, x), observe(env.device)
            return a, b, torch.mm(x, x), observe(env.device)
    return body


def other_subregion(env: Env) -> Body:
    def body(x):
        with env.region():
            with env.region("other"):
                b = torch.mm(x, x), observe(env.device)
            return b, torch.mm(x, x), observe(env.device)
    return body


def legacy(env: Env) -> Body:
    legacy = legacy_autocast(env.device)

    def body(x):
        with legacy(dtype=env.dtype):
            return torch.mm(x, x), observe(env.device)
    return body


#: how a region is spelled: (constructor, spelling) -> make(device, enabled, dtype, cache)
Make = Callable[[str, bool, torch.dtype, bool], Any]


def call_forms(device: str) -> dict[str, Make]:
    """Every call form of torch.autocast and of the device's legacy constructor
    (``torch.<device>.amp.autocast(enabled, dtype, cache_enabled)``), by name."""
    forms: dict[str, Make] = {
        "autocast-positional": lambda d, e, t, c: torch.autocast(d, t, e, c),
        "autocast-keyword": lambda d, e, t, c: torch.autocast(
            device_type=d, dtype=t, enabled=e, cache_enabled=c),
        "autocast-mixed": lambda d, e, t, c: torch.autocast(d, t, enabled=e, cache_enabled=c),
    }
    legacy = legacy_autocast(device)
    if legacy is not None:
        forms.update({
            "legacy-positional": lambda d, e, t, c: legacy(e, t, c),
            "legacy-keyword": lambda d, e, t, c: legacy(enabled=e, dtype=t, cache_enabled=c),
            "legacy-mixed": lambda d, e, t, c: legacy(e, dtype=t, cache_enabled=c),
        })
    return forms


#: the two regions each form opens: every argument away from its default in one of them
FORM_ARGS = ((True, False), (False, True))  # (enabled, cache_enabled), with the amp dtype


def every_call_form(env: Env) -> Body:
    """Each form, called inside compiled code, as a context manager and as a decorator, in
    FORM_ARGS's two regions; the outputs are named by form, use and enabled flag."""
    forms = list(call_forms(env.device).items())
    device, dtype = env.device, env.dtype

    def inner(x):
        return torch.mm(x, x), observe(device)

    def body(x):
        out = {}
        for name, make in forms:
            for enabled, cache in FORM_ARGS:
                with make(device, enabled, dtype, cache):
                    out[f"{name} with, enabled={enabled}"] = inner(x)
                out[f"{name} decorator, enabled={enabled}"] = make(
                    device, enabled, dtype, cache)(inner)(x)
        return out
    return body


class _CallableObject:
    """A callable instance, decorated with torch.autocast as a whole."""

    def __init__(self, device: str) -> None:
        self.device = device

    def __call__(self, x: torch.Tensor) -> Any:
        return torch.mm(x, x), observe(self.device)


def decorated_calls(env: Env) -> Body:
    """Functions and methods decorated with torch.autocast outside compiled code, called
    inside it (dynamo once broke the graph at each call: pytorch#114818): a function, a
    method, a staticmethod, a module's forward, a callable object, the legacy entry point's
    decorator where the device has one, and inside a region traced in the graph an
    ``enabled=False`` function and one of the other dtype. Outputs named by call."""
    device = env.device

    def mm(x):
        return torch.mm(x, x), observe(device)

    class Held:
        @env.region()
        def method(self, x):
            return mm(x)

        @staticmethod
        @env.region()
        def static(x):
            return mm(x)

    class Module(torch.nn.Module):
        @env.region()
        def forward(self, x):
            return mm(x)

    calls: dict[str, Callable[[torch.Tensor], Any]] = {
        "function": env.region()(mm), "method": Held().method, "staticmethod": Held.static,
        "module forward": Module(), "callable object": env.region()(_CallableObject(device))}
    legacy = legacy_autocast(device)
    if legacy is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # its deprecation, at decoration
            calls["legacy decorator"] = legacy(dtype=env.dtype)(mm)
    in_region = {"enabled=False function": env.region(enabled=False)(mm)}
    if env.other is not None:
        in_region["other-dtype function"] = env.region("other")(mm)

    def body(x):
        out = {name: call(x) for name, call in calls.items()}
        with env.region():
            for name, call in in_region.items():
                out[f"{name}, called in a region"] = call(x)
            out["the region after them"] = mm(x)
        return out
    return body


def graph_break(env: Env) -> Body:
    def body(x):
        with env.region():
            a = torch.mm(x, x)
            torch._dynamo.graph_break()
            b = torch.mm(x, x), observe(env.device)
        return a, b, torch.mm(x, x), observe(env.device)
    return body


def _skipped_mm(y: torch.Tensor) -> torch.Tensor:
    return torch.mm(y, y)


def _item_branch(y: torch.Tensor) -> torch.Tensor:
    return torch.mm(y, y) if torch.mm(y, y).sum().item() > 0 else -torch.mm(y, y)


def _tolist(y: torch.Tensor) -> torch.Tensor:
    return torch.tensor(torch.mm(y, y).tolist())  # the values as computed, read back


#: graph breaks that compute: the ops at the break run eagerly, inside the region
COMPUTING_BREAKS: dict[str, Callable[[], Callable[[torch.Tensor], torch.Tensor]]] = {
    "skipped_call": lambda: torch._dynamo.disable(_skipped_mm),  # a function dynamo skips
    "item_branch": lambda: _item_branch,  # .item(), then a branch on its value
    "tolist": lambda: _tolist,  # values read back to Python, unsupported in a graph
}


def computing_break(kind: str, form: str) -> Callable[[Env], Body]:
    """A graph break of ``kind`` that computes, with an op before and after it, in a region
    of ``form``: ``enabled``, ``nested`` (a region of the other dtype inside one),
    ``disabled`` (an enabled=False region inside one) or ``decorator``."""
    def build(env: Env) -> Body:
        brk = COMPUTING_BREAKS[kind]()

        def around(x):
            return torch.mm(x, x), brk(x), torch.mm(x, x), observe(env.device)

        def body(x):
            if form == "decorator":
                return torch.autocast(env.device, dtype=env.dtype)(around)(x), observe(env.device)
            with env.region():
                if form == "enabled":
                    inside = around(x)
                else:
                    with env.region("other") if form == "nested" else env.region(enabled=False):
                        inside = around(x)
            return inside, observe(env.device)
        return body
    return build


def _raise_in_eager(x: torch.Tensor) -> None:
    raise KeyError("raised by eager code inside the region")


def error_at_graph_break(env: Env) -> Body:
    raise_in_eager = torch._dynamo.disable(_raise_in_eager)  # dynamo cannot trace it: a break

    def body(x):
        with env.region():
            y = torch.mm(x, x)
            raise_in_eager(y)
            return y
    return body


class KernelError(RuntimeError):
    """What the kernel of ``amp_conformance::raising_kernel`` raises."""


@functools.cache
def raising_kernel() -> Callable[[torch.Tensor], torch.Tensor]:
    """An op whose kernel raises on the host, synchronously, on every device.

    The scenario needs "a kernel raises inside a traced region" without an asynchronous
    device error: an out-of-range index on CUDA is a device-side assert that leaves the
    process's device context unusable for every later item. The op's fake kernel gives
    the output's shape, so dynamo traces the call and the error happens when the graph runs.
    """

    @torch.library.custom_op("amp_conformance::raising_kernel", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        raise KernelError("raised by the kernel of amp_conformance::raising_kernel")

    @op.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    return op


def kernel_error(env: Env) -> Body:
    op = raising_kernel()

    def body(x):
        with env.region():
            y = torch.mm(x, x)
            return op(y)
    return body
