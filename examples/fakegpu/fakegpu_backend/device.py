"""The ``fakegpu`` device: a PrivateUse1 backend written in Python, its memory on the host.

Tensors on ``fakegpu`` are ordinary ``torch.Tensor`` objects whose device is
``fakegpu:0`` and whose dispatch keys are the PrivateUse1 family (``PrivateUse1``,
``AutogradPrivateUse1``, ``AutocastPrivateUse1``); there is no tensor subclass and no
Python dispatch key. What makes that possible from Python:

* ``torch.utils.backend_registration._setup_privateuseone_for_python_backend`` (experimental,
  torch >= 2.5) renames PrivateUse1, registers the device module and — the part nothing
  else in Python offers — a device guard and PrivateUse1 hooks implemented in Python.
  Without a device guard, every composite kernel (``_to_copy``, ``add.Tensor``'s
  out-of-place wrapper…) fails with "PyTorch is not linked with support for fakegpu
  devices", and autograd's ``InputMetadata`` aborts the process (``std::terminate``) as soon
  as a fakegpu tensor that requires grad enters an op.
* Memory: a tensor made on the host is handed to the device through DLPack with its
  device type rewritten to ``kDLExtDev`` (which torch maps to PrivateUse1). The new
  tensor's storage points at the host memory and owns it through the DLPack deleter.
* Kernels: one boxed Python fallback for the ``PrivateUse1`` key runs every op on the
  host — it views each fakegpu argument as a CPU tensor over the same memory, calls the
  op, and hands the results back (outputs that alias an argument keep that argument's
  storage, in-place and ``out=`` results are the argument objects themselves). The CPU
  kernels of the metadata ops (``as_strided``, ``view.dtype``, ``set_``), fetched with
  ``torch.library.get_kernel``, build fakegpu views without copying.

Everything here is process-global and registered once (``register()`` is idempotent).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

NAME = "fakegpu"
_CPU = torch.device("cpu")
_kDLExtDev = 12  # DLPack's device type for "extension" devices: PrivateUse1 in torch

_libraries: list[torch.library.Library] = []


class FakeGpuModule:
    """``torch.fakegpu``: what torch asks of a PrivateUse1 device module."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _lazy_init() -> None:
        return None

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(index: int) -> None:
        if int(index) != 0:
            raise RuntimeError(f"fakegpu has one device, got index {index}")

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        return None

    @staticmethod
    def get_amp_supported_dtype() -> list[torch.dtype]:
        """What torch.autocast("fakegpu", dtype=...) accepts."""
        return [torch.float16, torch.bfloat16]


# -- memory --------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensorHead(ctypes.Structure):
    # the first fields of DLTensor (the head of DLManagedTensor): data, device
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_KEYS = DispatchKeySet(DispatchKey.CPU)
_kernels: dict[str, Any] = {}


def _cpu_kernel(name: str):
    """The CPU kernel of a metadata op; it only touches sizes, strides and storage."""
    if name not in _kernels:
        _kernels[name] = torch.library.get_kernel(name, "CPU")
    return _kernels[name]


def _host_storage_on_device(host: torch.Tensor) -> torch.Tensor:
    """A fakegpu uint8 tensor over the whole storage of ``host``, owning it (DLPack)."""
    storage = host.untyped_storage()
    whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    capsule = torch.utils.dlpack.to_dlpack(whole)
    head = _DLTensorHead.from_address(_capsule_pointer(capsule, b"dltensor"))
    head.device.device_type = _kDLExtDev
    head.device.device_id = 0
    return torch._C._from_dlpack(capsule)


def _device_view(owner: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A fakegpu tensor on ``owner``'s storage with the dtype and geometry of ``like``."""
    empty = _cpu_kernel("aten::as_strided").call_boxed(_KEYS, owner, [0], [1], 0)
    shell = _cpu_kernel("aten::view.dtype").call_boxed(_KEYS, empty, like.dtype)
    return _cpu_kernel("aten::set_.source_Storage_storage_offset").call_boxed(
        _KEYS, shell, owner.untyped_storage(), like.storage_offset(), list(like.size()),
        list(like.stride()),
    )


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor over the memory of fakegpu tensor ``t`` (same storage layout).

    The CPU storage does not own the memory: it is only used while a kernel runs.
    """
    storage = t.untyped_storage()
    host = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), _CPU, storage.nbytes())
    return torch.empty(0, dtype=t.dtype).set_(host, t.storage_offset(), t.size(), t.stride())


def to_device(host: torch.Tensor, aliases: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """The fakegpu tensor for a host result: on an argument's storage where it aliases one."""
    pointer = host.untyped_storage().data_ptr()
    owner = (aliases or {}).get(pointer) if pointer else None
    if owner is None:
        owner = _host_storage_on_device(host)
    return _device_view(owner, host)


# -- kernels -------------------------------------------------------------------------

_NOT_HERE = DispatchKeySet(DispatchKey.AutocastCPU)


def _is_device_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == NAME


def run_on_host(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The PrivateUse1 kernel of every op: run it on host views of the arguments."""
    aliases: dict[int, torch.Tensor] = {}

    def down(x: Any) -> Any:
        if _is_device_tensor(x):
            pointer = x.untyped_storage().data_ptr()
            if pointer:
                aliases.setdefault(pointer, x)
            return host_view(x)
        if isinstance(x, torch.device) and x.type == NAME:
            return _CPU
        if isinstance(x, (list, tuple)):
            return type(x)(down(v) for v in x)
        return x

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == "cpu":
            return to_device(x, aliases)
        if isinstance(x, (list, tuple)):
            return type(x)(up(v) for v in x)
        return x

    writes, returns = _aliasing(op)
    written: dict[str, Any] = {}
    outs: dict[str, torch.Tensor] = {}
    for i, name, kwarg_only, alias_sets in writes:
        value = kwargs[name] if name in kwargs else (args[i] if i < len(args) else None)
        for alias_set in alias_sets:
            written[alias_set] = value
        if kwarg_only and _is_device_tensor(value):
            outs[name] = value

    host_args = down(args)
    host_kwargs = {k: down(v) for k, v in kwargs.items()}
    # a kernel of this device does not see the CPU's autocast
    with torch._C._ExcludeDispatchKeyGuard(_NOT_HERE):
        try:
            out = op(*host_args, **host_kwargs)
        except RuntimeError as exc:
            if not outs or "not resizable" not in str(exc):
                raise
            # an out= tensor too small for the result: the kernel resizes it, which a
            # host view cannot; run into host tensors, then grow the device tensors
            temps = {name: torch.empty(0, dtype=t.dtype) for name, t in outs.items()}
            out = op(*host_args, **{**host_kwargs, **temps})
            for name, t in outs.items():
                _resize_(None, t, list(temps[name].size()))
                host_view(t).copy_(temps[name])

    def result(i: int, value: Any) -> Any:
        for alias_set in returns[i]:
            if alias_set in written:
                return written[alias_set]  # in-place / out=: the argument itself
        return up(value)

    if len(returns) == 0:
        return out
    if len(returns) == 1:
        return result(0, out)
    return tuple(result(i, v) for i, v in enumerate(out))


_aliases: dict[torch._ops.OpOverload, tuple[tuple, tuple[tuple[str, ...], ...]]] = {}


def _aliasing(op: torch._ops.OpOverload) -> tuple[tuple, tuple[tuple[str, ...], ...]]:
    """What ``op`` writes: (index, name, keyword-only, alias sets) of each argument it
    writes, and the alias sets each return writes. Read once per op: each read of a
    schema makes its Python objects afresh (a plain dict: dynamo, which traces this
    kernel at a graph break, warns about a functools cache)."""
    if op not in _aliases:
        schema = op._schema
        _aliases[op] = (
            tuple((i, arg.name, arg.kwarg_only, tuple(arg.alias_info.before_set))
                  for i, arg in enumerate(schema.arguments)
                  if arg.alias_info is not None and arg.alias_info.is_write),
            tuple(tuple(r.alias_info.before_set)
                  if r.alias_info is not None and r.alias_info.is_write else ()
                  for r in schema.returns))
    return _aliases[op]


def _resize_(op, self, size, memory_format=None):
    """resize_: grows the storage on the device where needed (a host view cannot)."""
    numel = 1
    for d in size:
        numel *= d
    needed = (self.storage_offset() + numel) * self.element_size()
    storage = self.untyped_storage()
    if needed > storage.nbytes():
        grown = torch.zeros(needed, dtype=torch.uint8)
        if storage.nbytes():
            old = torch._C._construct_storage_from_data_pointer(storage.data_ptr(), _CPU, storage.nbytes())
            grown[: storage.nbytes()].copy_(torch.empty(0, dtype=torch.uint8).set_(old))
        owner = _host_storage_on_device(grown)
        _cpu_kernel("aten::set_.source_Storage_storage_offset").call_boxed(
            _KEYS, self, owner.untyped_storage(), self.storage_offset(), list(self.size()),
            list(self.stride()))
    return _cpu_kernel("aten::resize_").call_boxed(_KEYS, self, size, memory_format=memory_format)


def _set_storage(op, self, *args, **kwargs):
    """set_ with a fakegpu storage or tensor: metadata only, the CPU kernel does it."""
    return _cpu_kernel(op._schema.name + (f".{op._overloadname}" if op._overloadname != "default"
                                           else "")).call_boxed(_KEYS, self, *args, **kwargs)


#: ops whose composite kernel would bypass the fallback (copies between devices, storage
#: surgery) or pick a backend by device type (convolution -> *_overrideable)
_DIRECT = {
    "convolution": run_on_host,
    "_convolution": run_on_host,
    "_convolution.deprecated": run_on_host,
    "convolution_backward": run_on_host,
    "copy_": run_on_host,
    "_copy_from": run_on_host,
    "_copy_from_and_resize": run_on_host,
    "resize_": _resize_,
    "set_.source_Storage": _set_storage,
    "set_.source_Storage_storage_offset": _set_storage,
    "set_.source_Tensor": _set_storage,
}


def _op(name: str) -> torch._ops.OpOverload:
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def _bind(fn, op):
    def kernel(*args, **kwargs):
        return fn(op, *args, **kwargs)

    return kernel


def _lacking(names: frozenset[str]):
    """The fallback of a backend that has no kernel for the ops ``names`` (base names):
    for them it raises what the dispatcher raises where a backend registers none."""
    def kernel(op, *args, **kwargs):
        name = op._schema.name
        if name.split("::")[-1] in names:
            raise NotImplementedError(
                f"Could not run '{name}' with arguments from the 'PrivateUse1' backend. This "
                "could be because the operator doesn't exist for this backend, or was omitted "
                "during the selective/custom build process (if using custom build).")
        return run_on_host(op, *args, **kwargs)
    return kernel


def register(lacking: tuple[str, ...] = ()) -> None:
    """Make ``fakegpu`` a device of this process (idempotent); ``lacking``: ops it has no
    kernel for (a partial backend, for the suite's own tests)."""
    current = torch._C._get_privateuse1_backend_name()
    if current == NAME and hasattr(torch, NAME):
        return
    if current != "privateuseone":
        raise RuntimeError(f"PrivateUse1 is already taken by {current!r} in this process")
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(NAME, backend_module=FakeGpuModule())
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(_lacking(frozenset(lacking)) if lacking else run_on_host, "PrivateUse1")
    direct = torch.library.Library("aten", "IMPL")
    for name, fn in _DIRECT.items():
        direct.impl(name, _bind(fn, _op(name)), "PrivateUse1")
    _libraries.extend([fallback, direct])
