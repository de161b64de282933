"""The modules judged, and how each is built and called on the device under test.

Two sources give a :class:`Subject` (a module class, its constructor's and forward's
arguments): the entries of ``oplists/modules.toml`` (the default suite: the modules with
a path of their own under autocast) and every input of every ``ModuleInfo`` of PyTorch's
``module_db`` (the opt-in tier, imported only when asked: it needs ``expecttest``).

A subject is built afresh for every run, seeded, so the run under autocast and its control
start from the same parameters and inputs. On a fake device the module is made on ``meta``
and emptied onto the device inside FakeTensorMode, its parameters without grad (autograd
on fake tensors needs the device), and module_db's inputs, drawn on cpu, are moved there
with their strides.
"""

from __future__ import annotations

import functools
import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks import installed
from amp_conformance.core import rng
from amp_conformance.core.casting import map_tensors
from amp_conformance.core.errors import describe_error
from amp_conformance.core.modes import outside_modes
from amp_conformance.core.target import Target
from amp_conformance.schema import argspec
from amp_conformance.schema.modules import ModuleEntry, Same

#: the seed modules are constructed with (their reproduction says so too)
SEED = 0
MODULE_DB = "torch.testing._internal.common_modules"


class ModuleDbUnavailable(RuntimeError):
    """The running torch's module_db cannot be imported (a usage error, naming the fix)."""


@dataclass(frozen=True)
class Built:
    """A module on the device, and the forward's inputs."""

    module: torch.nn.Module
    args: tuple
    kwargs: dict


@dataclass(frozen=True)
class Subject:
    """One module built and called one way: an entry of modules.toml, or one input of a
    ModuleInfo (``index`` among the inputs module_db makes for ``training``)."""

    id: str
    name: str
    exercises: str
    entry: ModuleEntry | None = None
    info: str | None = None
    index: int = 0
    training: bool = True

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode()) & 0x7FFFFFFF

    def unusable(self) -> str | None:
        """Why this torch cannot have the module (its entry's ``since``), or None; a class
        missing from a release that should have it fails the item when built."""
        return self.entry.version_gap() if self.entry is not None else None

    def build(self, target: Target, amp_dtype: torch.dtype, grad: bool) -> Built:
        """The module and inputs on the target (call inside ``target.tensors()``); with
        ``grad`` every floating input requires grad (on a real device)."""
        if self.entry is not None:
            built = _from_entry(self.entry, target, amp_dtype, self.seed)
        else:
            built = _from_db(self, target)
        if grad and not target.fake:
            built = Built(built.module, *map_tensors(_wanting_grad, (built.args, built.kwargs)))
        return built

    def reproduction(self, device: str, amp_dtype: torch.dtype) -> list[str]:
        """Python lines that build ``module``, ``args`` and ``kwargs`` as :meth:`build` does."""
        if self.entry is None:
            return [f"from {MODULE_DB} import module_db",
                    f"info = next(m for m in module_db if m.name == {self.info!r})",
                    f"torch.manual_seed({SEED})",
                    f"made = info.module_inputs_func(info, device='cpu', dtype=torch.float32, "
                    f"requires_grad=False, training={self.training})[{self.index}]",
                    "module = info.module_cls(*made.constructor_input.args, "
                    f"**made.constructor_input.kwargs).to({device!r})",
                    "args, kwargs = made.forward_input.args, made.forward_input.kwargs"]
        e = self.entry
        render = functools.partial(argspec.render, device=device, amp_dtype=amp_dtype)
        init = [render(s) for s in e.init_args] + [f"{k}={render(s)}" for k, s in e.init.items()]
        args = [f"args.append(args[{s.index}])" if isinstance(s, Same)
                else f"args.append({render(s)})" for s in e.args]
        kwargs = ", ".join(f"{k!r}: {render(s)}" for k, s in e.kwargs.items())
        return [f"torch.manual_seed({SEED})",
                f"g = torch.Generator().manual_seed({self.seed})",
                f"module = torch.nn.{e.module}({', '.join(init)}).to({device!r})",
                "args = []", *args, f"kwargs = {{{kwargs}}}"]


def _wanting_grad(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() and not t.requires_grad:
        return t.detach().requires_grad_()
    return t


def _construct(target: Target, make: Callable[[], torch.nn.Module],
               inputs: tuple[tuple, dict] = ((), {})) -> torch.nn.Module:
    """``make()`` seeded on cpu and moved to the device; on a fake target made on meta
    (outside FakeTensorMode, which cannot swap a module's parameters; a lazy module's shapes
    taken from a call on meta copies of ``inputs``) and emptied onto the fake device,
    parameters without grad."""
    if target.fake:
        with outside_modes(), torch.device("meta"):
            module = make()
            if getattr(module, "has_uninitialized_params", lambda: False)():
                args, kwargs = map_tensors(lambda t: torch.empty_like(t, device="meta"), inputs)
                module(*args, **kwargs)
        return module.to_empty(device=target.device).requires_grad_(False)
    with rng.seeded("cpu", SEED):
        module = make()
    return module.to(target.device)


def _from_entry(entry: ModuleEntry, target: Target, amp_dtype: torch.dtype, seed: int) -> Built:
    cls = getattr(torch.nn, entry.module, None)
    if cls is None:
        raise AttributeError(f"torch {torch.__version__} has no torch.nn.{entry.module} "
                             f"({entry.path}: entry {entry.id!r})")
    init = argspec.Builder("cpu", amp_dtype, seed)  # constructor tensors: built with it
    init_args = [init.build(s) for s in entry.init_args]
    init_kwargs = {k: init.build(s) for k, s in entry.init.items()}
    module = _construct(target, lambda: cls(*init_args, **init_kwargs))
    builder = argspec.Builder(target.device, amp_dtype, seed)
    args: list[Any] = []
    for spec in entry.args:
        args.append(args[spec.index] if isinstance(spec, Same) else builder.build(spec))
    return Built(module, tuple(args), {k: builder.build(s) for k, s in entry.kwargs.items()})


# -- module_db (the opt-in tier) -----------------------------------------------------


def check_installed() -> None:
    """module_db's module and expecttest are installed, without importing them (an xdist
    controller's check: :mod:`amp_conformance.checks.installed`)."""
    installed.check_installed((MODULE_DB, "expecttest"), _unavailable)


def _unavailable(exc: BaseException) -> ModuleDbUnavailable:
    hint = " (pip install expecttest)" if "expecttest" in str(exc) else ""
    return ModuleDbUnavailable(f"--amp-modules needs PyTorch's ModuleInfo database "
                               f"({MODULE_DB}), which does not import here: "
                               f"{describe_error(exc)}{hint}")


@functools.cache
def module_db() -> dict[str, Any]:
    """Every ModuleInfo of the running release, by name, in module_db's order."""
    try:
        module = importlib.import_module(MODULE_DB)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same usage error
        raise _unavailable(exc) from None
    return {info.name: info for info in module.module_db}


@functools.cache
def db_inputs(name: str, training: bool) -> tuple[Any, ...]:
    """The ModuleInputs module_db makes for ``name`` on cpu in float32 (seeded, once)."""
    info = module_db()[name]
    with rng.seeded("cpu", SEED):
        return tuple(info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                             requires_grad=False, training=training))


#: how many of a ModuleInfo's inputs the tier judges per train and eval by default
#: (``--amp-modules-inputs``): module_db makes up to 60 per module, LinearCrossEntropyLoss
#: 36 large ones (a minute and a half in all), and the first ones show the module's kinds
DEFAULT_INPUTS = 2


def db_subjects(name: str, limit: int | None = DEFAULT_INPUTS) -> list[Subject]:
    """The first ``limit`` inputs (every one with None) of the ModuleInfo ``name``, for
    training and for eval."""
    found = []
    for training in (True, False):
        for index, made in enumerate(db_inputs(name, training)[:limit]):
            desc = getattr(made, "desc", "") or ""
            found.append(Subject(
                f"{name.removeprefix('nn.')}-{'train' if training else 'eval'}{index}",
                name.removeprefix("nn."), desc or f"module_db input {index}", info=name,
                index=index, training=training))
    return found


def _from_db(subject: Subject, target: Target) -> Built:
    info = module_db()[subject.info]
    made = db_inputs(subject.info, subject.training)[subject.index]
    ctor, forward = made.constructor_input, made.forward_input
    module = _construct(target, lambda: info.module_cls(*ctor.args, **ctor.kwargs),
                        (forward.args, forward.kwargs))
    args, kwargs = map_tensors(functools.partial(_moved, target), (made.forward_input.args,
                                                                  made.forward_input.kwargs))
    return Built(module, tuple(args), dict(kwargs))


def _moved(target: Target, t: torch.Tensor) -> torch.Tensor:
    if target.fake:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=target.device)
    return t.detach().clone().to(target.device)
