"""A backend shaped like the young ones that lower torch onto another array library.

Imported with ``--backend-module amp_npmode`` (``tests/backends`` on the path), it makes
PrivateUse1 the ``npmode`` device. Unlike ``amp_pymode`` (host tensors under a process
mode), everything here is the way such backends really are:

- an ``npmode`` tensor is a wrapper subclass around a **numpy array** (bfloat16 kept as its
  bits in ``int16``): ``.cpu()``, ``.item()``, ``.tolist()`` and printing all go through
  the backend, which converts to and from numpy for every op;
- its **environment** is two modes entered once, in the thread that imported it and in
  no other (torch keeps modes per thread): a dispatch mode that sees every aten op,
  tensor-less ones included, and raises :class:`OperatorNotFound` (its own class, no
  torch message) for any op it lacks; and a function mode that runs every call on its
  tensors without autograd, as a backend that lowers calls instead of differentiating
  them does: its outputs never require grad;
- outside the environment (another thread) its tensors refuse to compute:
  :class:`NotInEnvironment`;
- it has only the strided layout: a sparse tensor cannot be made on it.

Its autocast policy (``POLICY``) is registered under ``AutocastPrivateUse1``, and
``amp_npmode.toml`` beside it says the same. The suite must judge it by its departures
alone, and name its limits (no autograd, no sparse, one thread) once, as limits.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch
from python_autocast import register_policy
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

NAME = "npmode"
#: ops it has no lowering for: GradScaler's kernels, convolution, and what swaps or
#: reshapes a tensor's storage in place (a numpy array cannot be re-pointed)
UNLOWERED = frozenset({
    "convolution", "_convolution", "convolution_backward",
    "_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_",
    "set_", "resize_", "as_strided_", "t_", "transpose_", "squeeze_", "unsqueeze_",
    "_pack_padded_sequence"})
#: the aten ops of torch's dtype utilities: tensor-less, seen by the dispatch mode
TENSORLESS = frozenset({"promote_types", "result_type", "can_cast"})
POLICY = {"mm": "lower", "bmm": "lower", "addmm": "lower", "linear": "lower",
          "exp": "fp32", "log": "fp32", "mse_loss": "fp32", "cat": "promote",
          "stack": "promote"}


class OperatorNotFound(Exception):
    """The backend's own word for an op it cannot lower."""


class NotInEnvironment(Exception):
    """What its tensors say where the environment is not entered (another thread)."""


class NpModeModule:
    """``torch.npmode``: what torch asks of a PrivateUse1 device module."""

    is_available = staticmethod(lambda: True)
    is_initialized = staticmethod(lambda: True)
    _lazy_init = staticmethod(lambda: None)
    device_count = staticmethod(lambda: 1)
    current_device = staticmethod(lambda: 0)
    set_device = staticmethod(lambda index: None)
    synchronize = staticmethod(lambda device=None: None)
    _is_in_bad_fork = staticmethod(lambda: False)
    manual_seed = staticmethod(lambda seed: torch.default_generator.manual_seed(seed))
    manual_seed_all = manual_seed
    get_rng_state = staticmethod(lambda device=None: torch.default_generator.get_state())
    set_rng_state = staticmethod(lambda state, device=None: torch.default_generator.set_state(state))
    get_amp_supported_dtype = staticmethod(lambda: [torch.float16, torch.bfloat16])


def _to_numpy(host: torch.Tensor) -> np.ndarray:
    if host.layout != torch.strided:
        raise OperatorNotFound(f"{NAME} arrays are dense: no {host.layout} tensors")
    if host.dtype == torch.bfloat16:
        return host.view(torch.int16).numpy()
    return host.numpy()


def _to_host(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    host = torch.from_numpy(array)
    return host.view(torch.bfloat16) if dtype == torch.bfloat16 else host


class NpTensor(torch.Tensor):
    """An ``npmode`` tensor: PrivateUse1's keys, its values in a numpy array."""

    array: np.ndarray

    @staticmethod
    def __new__(cls, host: torch.Tensor) -> NpTensor:
        made = torch.Tensor._make_wrapper_subclass(
            cls, host.size(), strides=host.stride(), dtype=host.dtype,
            device=torch.device(NAME, 0), requires_grad=False)
        made.array = _to_numpy(host)
        return made

    @property
    def host(self) -> torch.Tensor:
        return _to_host(self.array, self.dtype)

    def __repr__(self) -> str:  # torch's printing turns modes off: the backend prints
        values = self.array.view(np.uint16) if self.dtype == torch.bfloat16 else self.array
        return f"{NAME}({values!r}, dtype={self.dtype})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        raise NotInEnvironment(f"{NAME} can only do math within the {NAME} environment "
                               f"(thread {threading.current_thread().name})")


def _on_device(value: Any) -> bool:
    return isinstance(value, torch.device) and value.type == NAME or value == NAME


def run_lowered(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on numpy's arrays (through host views of them); results back on npmode."""
    name = func._schema.name.split("::")[-1]
    if name in UNLOWERED:
        raise OperatorNotFound(f"Operator with name aten::{name} has no lowering")
    originals = {id(a): a for a in tree_leaves((args, kwargs)) if isinstance(a, NpTensor)}
    hosts: dict[int, NpTensor] = {}

    def unwrap(value: Any) -> Any:
        if not isinstance(value, NpTensor):
            return value
        host = value.host
        hosts[id(host)] = value
        return host
    host_args, host_kwargs = tree_map(unwrap, (args, kwargs))
    target = kwargs.get("device")
    if _on_device(target):
        host_kwargs["device"] = torch.device("cpu")
    out = func(*host_args, **host_kwargs)
    to_device = target is None and bool(originals) or _on_device(target)

    def wrap(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in hosts:  # in place or out=: the argument itself
            return hosts[id(value)]
        return NpTensor(value) if to_device and value.device.type == "cpu" else value
    return tree_map(wrap, out)


class Lowering(TorchDispatchMode):
    """The environment's dispatch mode: every aten op that meets an npmode tensor or
    device is lowered onto numpy; the dtype utilities have no lowering."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in TENSORLESS:
            raise OperatorNotFound(f"Operator with name aten::{name} has no lowering")
        if not any(isinstance(a, NpTensor) for a in tree_leaves((args, kwargs))) \
                and not _on_device(kwargs.get("device")):
            return func(*args, **kwargs)
        return run_lowered(func, args, kwargs)


class Environment(TorchFunctionMode):
    """The environment's function mode: calls on its tensors run without autograd."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        ours = any(isinstance(a, NpTensor) for a in tree_leaves((args, kwargs))) \
            or _on_device(kwargs.get("device"))
        if not ours or func in _AUTOGRAD_API:
            return func(*args, **kwargs)
        if func is torch.Tensor.tolist:  # torch refuses subclasses: read it back here
            return args[0].cpu().tolist()
        if func in _FROM_DATA and _on_device(kwargs.get("device")):  # made on the host first
            kwargs = {**kwargs, "device": "cpu"}
            kwargs.pop("requires_grad", None)  # no autograd through its tensors
            return NpTensor(func(*args, **kwargs))
        with torch.no_grad():
            return func(*args, **kwargs)


#: tensors made from Python data: torch builds them below every mode, so the environment
#: makes them itself
_FROM_DATA = (torch.tensor, torch.as_tensor)
#: what a user calls to ask for gradients: left to autograd (which finds none)
_AUTOGRAD_API = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad,
                 torch.Tensor.requires_grad_)

_state: list[Any] = []


def register() -> None:
    """Once per process: the device, its environment (entered for good, in this thread
    alone) and its policy."""
    if _state:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME, backend_module=NpModeModule())
    libraries = register_policy(NAME, POLICY)
    modes = [Lowering(), Environment()]
    for mode in modes:
        mode.__enter__()
    _state.extend([*libraries, *modes])


register()
