"""A backend built the way several young ones start: Python modes over host tensors.

Imported with ``--backend-module amp_pymode`` (``tests/backends`` on the path), it makes
PrivateUse1 the ``pymode`` device and keeps two modes active in the whole process:

- a **dispatch mode** that runs every op with a ``pymode`` tensor or ``device="pymode"``
  on the host: a ``pymode`` tensor is a wrapper (``_make_wrapper_subclass``) around a CPU
  tensor, so its dispatch keys are PrivateUse1's and autocast meets it at
  ``AutocastPrivateUse1``. Its op set is deliberately partial: ``MISSING`` (convolution,
  GradScaler's kernels) returns ``NotImplemented``, as a Python backend says it has no
  kernel; every other op of every device passes through it;
- a **function mode** that "lowers" every torch function call and cannot lower the dtype
  utilities (``torch.promote_types``, ``result_type``, ``can_cast``): it raises for them,
  whoever calls them; and the dispatch mode, which sees their aten ops too (they take no
  tensor), refuses them with an exception class of its own (:class:`OperatorNotFound`),
  as a backend that lowers aten ops does for what it has no lowering of.

Its own autocast policy (``POLICY``) is registered under ``AutocastPrivateUse1``; the op
list ``amp_pymode.toml`` beside it says the same. The suite must judge this backend by its
departures alone: its own bookkeeping (dtype arithmetic, host comparisons, sample making,
state capture, reports) may not go through these modes.
"""

from __future__ import annotations

from typing import Any

import torch
from python_autocast import register_policy
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

NAME = "pymode"
MISSING = frozenset({"_amp_update_scale_"})
#: ops it lacks and says so in words of its own (:class:`OperatorNotFound`), as a backend
#: that lowers aten ops does
UNLOWERED = frozenset({"convolution", "_convolution", "convolution_backward",
                       "_amp_foreach_non_finite_check_and_unscale_"})
UNLOWERABLE = (torch.promote_types, torch.result_type, torch.can_cast)
#: the aten ops of those utilities: tensor-less, seen by the dispatch mode all the same
TENSORLESS = frozenset({"promote_types", "result_type", "can_cast"})


class OperatorNotFound(Exception):
    """The backend's own word for an op it cannot lower (no RuntimeError, no torch message)."""
POLICY = {"mm": "lower", "bmm": "lower", "addmm": "lower", "linear": "lower",
          "exp": "fp32", "log": "fp32", "mse_loss": "fp32", "cat": "promote",
          "stack": "promote"}


class PyModeModule:
    """``torch.pymode``: what torch asks of a PrivateUse1 device module (one device, the
    host's generator)."""

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


class PyModeTensor(torch.Tensor):
    """A ``pymode`` tensor: PrivateUse1's keys, its values in ``host``."""

    host: torch.Tensor

    @staticmethod
    def __new__(cls, host: torch.Tensor) -> PyModeTensor:
        made = torch.Tensor._make_wrapper_subclass(
            cls, host.size(), strides=host.stride(), storage_offset=host.storage_offset(),
            dtype=host.dtype, device=torch.device(NAME, 0), requires_grad=host.requires_grad)
        made.host = host
        return made

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        # where the mode is not active (another thread): the same host kernels
        return run_on_host(func, args, kwargs or {})

    def __repr__(self) -> str:
        return f"pymode({self.host!r})"


def _on_device(value: Any) -> bool:
    return isinstance(value, torch.device) and value.type == NAME or value == NAME


#: outputs a kernel leaves on the host, as PyTorch's own backends do (by output index)
HOST_OUTPUTS = {"_pack_padded_sequence": (1,)}


def run_on_host(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on the host tensors of its pymode arguments; results back on pymode."""
    name = func._schema.name.split("::")[-1]
    if name in MISSING:
        return NotImplemented
    if name in UNLOWERED:
        raise OperatorNotFound(f"Operator with name aten::{name} has no lowering")
    leaves = tree_leaves((args, kwargs))
    originals = {id(a.host): a for a in leaves if isinstance(a, PyModeTensor)}
    unwrap = lambda a: a.host if isinstance(a, PyModeTensor) else a  # noqa: E731
    host_args, host_kwargs = tree_map(unwrap, (args, kwargs))
    target = kwargs.get("device")
    if _on_device(target):
        host_kwargs["device"] = torch.device("cpu")
    out = func(*host_args, **host_kwargs)
    to_device = target is None or _on_device(target)

    def wrap(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in originals:  # in place or out=: the argument itself
            return originals[id(value)]
        return PyModeTensor(value) if to_device and value.device.type == "cpu" else value
    if isinstance(out, tuple) and name in HOST_OUTPUTS:
        return tuple(o if i in HOST_OUTPUTS[name] else wrap(o) for i, o in enumerate(out))
    return tree_map(wrap, out)


class HostOps(TorchDispatchMode):
    """The process's dispatch mode: every op that meets a pymode tensor or device runs on
    the host; every other op passes through."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if name in TENSORLESS:
            raise OperatorNotFound(f"Operator with name aten::{name} has no lowering")
        if not any(isinstance(a, PyModeTensor) for a in tree_leaves((args, kwargs))) \
                and not _on_device(kwargs.get("device")):
            return func(*args, **kwargs)
        return run_on_host(func, args, kwargs)


class Lowering(TorchFunctionMode):
    """The backend's lowering of torch calls: the dtype utilities it cannot lower."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if func in UNLOWERABLE:
            raise NotImplementedError(f"pymode cannot lower torch.{func.__name__}")
        return func(*args, **(kwargs or {}))


_state: list[Any] = []


def register() -> None:
    """Once per process: the device, its modes (entered for good) and its policy."""
    if _state:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME, backend_module=PyModeModule())
    libraries = register_policy(NAME, POLICY)
    modes = [HostOps(), Lowering()]
    for mode in modes:
        mode.__enter__()
    _state.extend([*libraries, *modes])


register()
