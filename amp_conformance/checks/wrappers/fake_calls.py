"""The calls library code makes beyond ops, as they behave on the device (``--fake``).

- ``torch.accelerator`` and the device's module (``torch.cuda``, ``torch.xpu``,
  ``torch.mps``: what ``torch.get_device_module`` gives) answer as for one available device:
  the current accelerator and device, the device count, its properties, capability and name
  (a Hopper-class GPU: bfloat16, compute capability 9.0), bfloat16 support, synchronize,
  memory queries (nothing allocated), RNG state and seeds (no generator to seed: fake tensors
  draw no values); streams and events wait for nothing (ops run at once). Only the calls the
  running torch has are answered, so code calling one it lacks fails as on the device.
- ``Tensor.item()`` gives a number without a value (:class:`NoValue`): printed, logged or
  added up it is fine; deciding a branch, compared or made an index it raises
  ``NotApplicable`` naming the call, as do ``tolist()`` and ``numpy()``, and a torch call
  that fails given one (:class:`Valueless`). Any other error is the library's.
- Assignment through indexing (``x[mask] = 0``, ``x[:, 0] = y``) is the op it stands for.
- ``backward()`` is not applicable (autograd on fake tensors of an absent device aborts the
  process), named with the call.

:func:`call_site` names where library code made a call: the innermost frame outside torch,
the suite and Python's own machinery.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator
from types import SimpleNamespace, TracebackType
from typing import Any
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from amp_conformance.core.errors import NotApplicable
from amp_conformance.core.target import FAKE_AUTOGRAD

aten = torch.ops.aten
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: torch and this package: never the library's frame
_SKIPPED = (os.path.dirname(os.path.abspath(torch.__file__)), _OURS)
_STDLIB = os.path.dirname(os.path.abspath(contextlib.__file__))
PREFIX = "not applicable on a fake device: "


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` lies in ``folder``, compared by whole components (``torch`` does not
    hold ``torchmetrics``)."""
    try:
        return os.path.commonpath([path, folder]) == folder
    except ValueError:  # another drive
        return False


def _library(filename: str) -> bool:
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if any(_inside(path, folder) for folder in _SKIPPED):
        return False
    # the standard library, not the packages installed under it
    return not (_inside(path, _STDLIB) and not {"site-packages", "dist-packages"}
                & set(path.split(os.sep)))


def call_site(tb: TracebackType | None = None) -> str:
    """``file:line (function): source`` of the innermost library frame of ``tb`` (or of
    the current stack), the path from its package folder on; ``""`` if none."""
    frames = traceback.extract_tb(tb) if tb is not None else traceback.extract_stack()[:-1]
    for frame in reversed(frames):
        if _library(frame.filename):
            path = frame.filename.replace(os.sep, "/")
            where = path.split("/site-packages/")[-1] if "/site-packages/" in path \
                else "/".join(path.split("/")[-2:])
            line = (frame.line or "").strip()
            return f"{where}:{frame.lineno} ({frame.name})" + (f": {line}" if line else "")
    return ""


def not_applicable(what: str, tb: TracebackType | None = None) -> NotApplicable:
    site = call_site(tb)
    return NotApplicable(PREFIX + (f"{site}: {what}" if site else what))


class NoValue(float):
    """What ``Tensor.item()`` gives on a fake device: a number without a value (nan in
    print). Arithmetic gives another; anything that decides on it raises NotApplicable."""

    site: str

    def __new__(cls, site: str) -> NoValue:
        made = super().__new__(cls, "nan")
        made.site = site
        return made

    def _decides(self, *_: Any) -> Any:
        raise NotApplicable(f"{PREFIX}{self.site}: Tensor.item()'s value decides what the "
                            "code does (fake tensors carry no values)")

    def _again(self, *_: Any) -> NoValue:
        return NoValue(self.site)

    __bool__ = __int__ = __index__ = __round__ = __floor__ = __ceil__ = __trunc__ = _decides
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _decides
    __hash__ = float.__hash__
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _again
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __pow__ = __rpow__ = _again
    __neg__ = __pos__ = __abs__ = __mod__ = __rmod__ = _again


def _no_value_in(values: Any) -> NoValue | None:
    return next((v for v in torch.utils._pytree.tree_leaves(values) if isinstance(v, NoValue)),
                None)


def _works_with_numbers(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the call succeeds with its numbers without a value made 1 or 2: its error
    came from the value it lacked, not from the call."""
    for number in (1.0, 2.0):
        given = torch.utils._pytree.tree_map(
            lambda v, n=number: n if isinstance(v, NoValue) else v, (args, kwargs))
        try:
            func(*given[0], **given[1])
        except Exception:  # noqa: BLE001 - any failure: not this number
            continue
        return True
    return False


class Valueless(TorchFunctionMode):
    """A torch call that raises when given a number without a value (``torch.arange`` of
    one, as in a codebook's size read with ``item()``), and works given 1 or 2 in its place,
    is not applicable, named with the call and where the number came from; any other error
    is the library's own."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            return func(*args, **kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            given = _no_value_in((args, kwargs))
            if given is None or not _works_with_numbers(func, args, kwargs):
                raise
            name = getattr(func, "__name__", str(func))
            said = " ".join(str(exc).split())[:300]
            raise not_applicable(f"{name}() was given the number Tensor.item() gave at "
                                 f"{given.site}, which has no value (fake tensors carry none): "
                                 f"{type(exc).__name__}: {said}") from exc


_PROPERTIES = SimpleNamespace(name="amp-conformance fake device", major=9, minor=0,
                              total_memory=80 * 2**30, multi_processor_count=132,
                              is_integrated=False, is_multi_gpu_board=False,
                              L2_cache_size=50 * 2**20, warp_size=32)


def _index_of(device: Any = None) -> int:
    """The device index asked for: 0, the one the fake device has; another raises as
    the device would."""
    index = device if isinstance(device, int) or device is None else torch.device(device).index
    if index not in (None, 0):
        raise RuntimeError(f"invalid device ordinal (device {index}; the fake device has "
                           "one, index 0)")
    return 0


def _properties(device: Any = None) -> SimpleNamespace:
    _index_of(device)
    return _PROPERTIES


def _capability(device: Any = None) -> tuple[int, int]:
    _index_of(device)
    return _PROPERTIES.major, _PROPERTIES.minor


def _name(device: Any = None) -> str:
    _index_of(device)
    return _PROPERTIES.name


def _nothing(device: Any = None, *_: Any, **__: Any) -> None:
    if not isinstance(device, (torch.Tensor, list)):  # set_rng_state(state) and kin
        _index_of(device)


def _seeded(seed: int) -> None:
    """A seed for a generator the fake device does not have (fake tensors draw nothing)."""


def _zero(device: Any = None) -> int:
    _index_of(device)
    return 0


class _Stream:
    """A stream or event of the fake device: ops run at once, so there is nothing to wait
    for."""

    def __init__(self, *_: Any, **__: Any):
        self.device = torch.device("cuda", 0)

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *_: Any) -> None: ...
    def wait_stream(self, *_: Any) -> None: ...
    def wait_event(self, *_: Any) -> None: ...
    def record_event(self, *_: Any) -> _Stream:
        return _Stream()
    def record(self, *_: Any) -> None: ...
    def synchronize(self) -> None: ...
    def query(self) -> bool:
        return True
    def elapsed_time(self, *_: Any) -> float:
        return 0.0


def _rng_state(device: Any = None) -> torch.Tensor:
    _index_of(device if not isinstance(device, str) or ":" in device else None)
    return torch.zeros(16, dtype=torch.uint8, device="cpu")


def _module_calls() -> dict[str, Callable[..., Any]]:
    """The device module's calls, as for one available device."""
    total = _PROPERTIES.total_memory
    return {"is_available": lambda: True, "is_initialized": lambda: True, "init": lambda: None,
            "current_device": lambda: 0, "device_count": lambda: 1,
            "get_device_properties": _properties, "get_device_capability": _capability,
            "get_device_name": _name, "is_bf16_supported": lambda *a, **k: True,
            "set_device": _nothing, "synchronize": _nothing,
            "Stream": _Stream, "Event": _Stream, "current_stream": _Stream,
            "default_stream": _Stream, "stream": lambda *_: contextlib.nullcontext(),
            "set_stream": _nothing,
            "memory_allocated": _zero, "max_memory_allocated": _zero,
            "memory_reserved": _zero, "max_memory_reserved": _zero,
            "current_allocated_memory": lambda: 0, "driver_allocated_memory": lambda: 0,
            "reset_peak_memory_stats": _nothing, "reset_max_memory_allocated": _nothing,
            "reset_accumulated_memory_stats": _nothing, "empty_cache": lambda: None,
            "mem_get_info": lambda device=None: (total, total),
            "memory_stats": lambda device=None: {},
            "get_rng_state": _rng_state, "set_rng_state": _nothing,
            "get_rng_state_all": lambda: [_rng_state()], "set_rng_state_all": _nothing,
            "manual_seed": _seeded, "manual_seed_all": _seeded, "seed": lambda: None,
            "seed_all": lambda: None, "initial_seed": lambda: 0}


def _accelerator_calls(device: str) -> dict[str, Callable[..., Any]]:
    """``torch.accelerator``'s calls, the fake device being the current accelerator."""
    calls = {name: fn for name, fn in _module_calls().items()
             if name in ("synchronize", "current_stream", "set_stream", "empty_cache",
                         "memory_stats", "memory_allocated", "max_memory_allocated",
                         "memory_reserved", "max_memory_reserved",
                         "reset_accumulated_memory_stats", "reset_peak_memory_stats",
                         "device_count", "is_available")}
    total = _PROPERTIES.total_memory
    return {**calls, "current_accelerator": lambda check_available=False: torch.device(device),
            "current_device_index": lambda: 0, "current_device_idx": lambda: 0,
            "set_device_index": _nothing, "set_device_idx": _nothing,
            "device_index": lambda *_: contextlib.nullcontext(),
            "get_memory_info": lambda device=None: (total, total)}


@contextlib.contextmanager
def device_available(device: str) -> Iterator[None]:
    """``torch.accelerator`` and ``torch.<device>`` as for one available ``device``, the
    current accelerator (each call the running torch has)."""
    with contextlib.ExitStack() as stack:
        for module, calls in ((getattr(torch, "accelerator", None), _accelerator_calls(device)),
                              (getattr(torch, device, None), _module_calls())):
            for name, fn in calls.items() if module is not None else ():
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, fn))
        yield


def indexed(x: torch.Tensor, index: Any) -> torch.Tensor:
    """``x[index]`` as the ops it stands for (basic indexing; a tensor index is gathered)."""
    index = index if isinstance(index, tuple) else (index,)
    if any(i is Ellipsis for i in index):
        k = index.index(Ellipsis)
        used = sum(i is not None and i is not Ellipsis for i in index)
        index = index[:k] + (slice(None),) * (x.dim() - used) + index[k + 1:]
    dim = 0
    for i in index:
        if i is None:
            x, dim = aten.unsqueeze.default(x, dim), dim + 1
        elif isinstance(i, slice):
            x = aten.slice.Tensor(x, dim, i.start, i.stop, i.step or 1)
            dim += 1
        elif isinstance(i, int):
            x = aten.select.int(x, dim, i)
        elif isinstance(i, torch.Tensor) and not i.is_floating_point():
            x = aten.index.Tensor(x, [None] * dim + [i])
            dim += i.dim() if i.dtype != torch.bool else 1
        else:
            raise not_applicable(f"indexing with {type(i).__name__}")
    return x


def _mask_index(index: Any) -> torch.Tensor | None:
    index = index[0] if isinstance(index, tuple) and len(index) == 1 else index
    return index if isinstance(index, torch.Tensor) and index.dtype == torch.bool else None


def setitem(x: torch.Tensor, index: Any, value: Any,
            view: Callable[[torch.Tensor, Any], torch.Tensor]) -> None:
    """``x[index] = value`` as the ops it stands for: a boolean mask as a ``where`` copied
    back, an index whose result is a view as a copy into it, one integer tensor index (the
    others whole slices) as ``index_put_``."""
    if not isinstance(value, torch.Tensor):
        value = torch.full((), value, dtype=x.dtype, device=x.device)
    mask = _mask_index(index)
    if mask is not None:
        if value.dim() and value.numel() != 1:
            raise not_applicable("assigning a tensor through a boolean mask (its shape "
                                 "depends on the mask's values)")
        wide = mask.reshape(mask.shape + (1,) * (x.dim() - mask.dim()))
        aten.copy_.default(x, torch.where(wide, value.to(x.dtype).reshape(()), x))
        return
    parts = index if isinstance(index, tuple) else (index,)
    tensors = [i for i, p in enumerate(parts) if isinstance(p, torch.Tensor)]
    if not tensors:
        aten.copy_.default(view(x, index), value)
        return
    if len(tensors) == 1 and all(p == slice(None) for p in parts[:tensors[0]]):
        indices = [None] * tensors[0] + [parts[tensors[0]]]
        rest = parts[tensors[0] + 1:]
        if all(p == slice(None) for p in rest):
            aten.index_put_.default(x, indices, value.to(x.dtype))
            return
    raise not_applicable(f"assigning through the index {index!r}")


def _refused(what: str) -> Callable[..., Any]:
    def refuse(*_: Any, **__: Any) -> Any:
        raise not_applicable(what)
    return refuse


def _backward(device: str) -> Callable[..., Any]:
    return _refused(f"backward(): {FAKE_AUTOGRAD.format(device=device).split(': ', 1)[1]}")


def methods(ours: Callable[[Any], bool], device: str) -> contextlib.ExitStack:
    """``item``, ``tolist``, ``numpy``, ``__setitem__``, ``copy_`` and ``backward`` of the
    device's fake tensors as on the device, or NotApplicable naming the call (``item``,
    ``tolist`` and ``numpy`` of every fake tensor: none carries a value)."""
    from torch._subclasses.fake_tensor import FakeTensor

    stack = contextlib.ExitStack()
    fakes = {"item": (FakeTensor, lambda self: NoValue(call_site())),
             "tolist": (FakeTensor, _refused("Tensor.tolist() reads values (fake tensors "
                                             "carry none)")),
             "numpy": (FakeTensor, _refused("Tensor.numpy() reads values (fake tensors "
                                            "carry none)")),
             "__setitem__": (ours, lambda self, index, value: setitem(self, index, value,
                                                                      indexed)),
             "copy_": (ours, lambda self, src, non_blocking=False: aten.copy_.default(
                 self, src, non_blocking)),
             "record_stream": (ours, lambda self, stream: None),
             "backward": (ours, _backward(device))}
    for name, (which, fake) in fakes.items():
        for cls in (torch.Tensor, FakeTensor):
            if cls is torch.Tensor or name in vars(cls):  # FakeTensor's own, where it has one
                stack.enter_context(mock.patch.object(cls, name, _patched(
                    getattr(cls, name), which, fake)))
    backward = torch.autograd.backward

    def autograd_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        each = tensors if isinstance(tensors, (list, tuple)) else (tensors,)
        if any(ours(t) for t in each):
            _backward(device)()
        return backward(tensors, *args, **kwargs)
    stack.enter_context(mock.patch.object(torch.autograd, "backward", autograd_backward))
    return stack


def _patched(original: Callable[..., Any], which: Any, fake: Callable[..., Any]
             ) -> Callable[..., Any]:
    """``fake`` for the tensors ``which`` selects (a class, or a predicate), else
    ``original``."""
    def method(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        chosen = isinstance(self, which) if isinstance(which, type) else which(self)
        return fake(self, *args, **kwargs) if chosen else original(self, *args, **kwargs)
    return method
