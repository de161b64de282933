"""How a library declares the autocast wrapper it ships, and what the suite holds it to.

Most people reach autocast through a library's wrapper (open_clip's ``get_autocast``,
speechbrain's ``TorchAutocast`` and ``fwd_default_precision``, accelerate's and Lightning's
context managers). A declaration says what the wrapper claims; the wrapper checks
(``suite/test_wrappers.py``) hold it to that and to autocast's contract. Two kinds:

- :class:`RegionFactory`: something that makes an autocast region from a precision name
  and a device type (open_clip's ``get_autocast(precision, device_type=...)()``).
- :class:`RegionRunner`: something that runs the user's code inside a region it enters
  itself, where no region object is handed out (a trainer's or evaluator's step calling
  the model: pytorch-ignite's ``amp_mode``).
- :class:`ForwardDecorator`: a decorator for a forward function, in the manner of
  ``torch.amp.custom_fwd(cast_inputs=...)`` (speechbrain's ``fwd_default_precision``).
- :class:`Float32Island`: a function, module or context manager that leaves autocast for a
  float32 computation (a layer that must not run in lower precision): inputs cast to
  float32, the device's autocast off inside, the caller's region back after.
- :class:`RegionSwap`: a context manager that, entered inside a region, switches the
  region's dtype (float16 to bfloat16 where the device supports it) and gives it back on exit.
- :class:`Predicate`: a yes/no helper answering "is autocast on for this tensor's device"
  (timm's ``fast_norm.is_autocast_enabled``).
- :class:`Scaler`: a GradScaler, a subclass of one or a helper around one (timm's
  ``NativeScaler``), held to the gradscaler family's training orders.

A declaration is plain data plus callables; :func:`validate` turns a bad one into one
:class:`DeclarationError` naming the wrapper and the field. Declarations reach a run through
``--wrapper MODULE:NAME`` (an object, a list of them, or a callable returning either) or
the hook ``pytest_amp_conformance_wrappers(config)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

#: what a region factory does for a precision name that means float32, or one it does not know
NOOP, ERROR, FALLBACK = "noop", "error", "fallback"
BEHAVIOURS = (NOOP, ERROR, FALLBACK)
#: the dtype a float32 island returns, and what its parts before and after its float32 core
#: compute in: float32, its first floating input's dtype, or the caller's region's (the
#: innermost enabled region's dtype on the device; float32 where none is on)
FLOAT32, INPUT, REGION = "float32", "input", "region"
RETURNS = (FLOAT32, INPUT, REGION)
#: what a float32 island's part before or after its core may compute in
PARTS = (INPUT, REGION)
#: what a predicate is called with: a tensor, its ``torch.device``, or its device type
TENSOR, DEVICE, DEVICE_TYPE = "tensor", "device", "device_type"
TAKES = (TENSOR, DEVICE, DEVICE_TYPE)


class DeclarationError(ValueError):
    """A wrapper declaration that cannot be checked: names the wrapper and the field."""

    def __init__(self, wrapper: str, field_name: str, problem: str):
        super().__init__(f"wrapper {wrapper!r}: {field_name}: {problem}")
        self.wrapper, self.field, self.problem = wrapper, field_name, problem


@dataclass(frozen=True)
class RegionFactory:
    """A wrapper that makes autocast regions.

    Every field names the check that uses it (``suite/test_wrappers.py``).
    """

    #: the wrapper's name in item ids and the report, e.g. ``open_clip.get_autocast``
    name: str
    #: ``make(precision, device_type)`` -> a context manager (a fresh one per call); the
    #: region checks enter it where they would enter ``torch.autocast``
    make: Callable[[str, str], AbstractContextManager]
    #: the device types the wrapper claims to support (items are made for the run's device
    #: when it is one of them)
    devices: tuple[str, ...]
    #: precision name -> the autocast dtype the region must set on every claimed device
    #: (state, nesting, exception, cache and policy checks run once per name)
    precisions: Mapping[str, torch.dtype]
    #: names that mean float32 (no autocast): checked to leave autocast off, or to raise
    #: when ``float32`` is ``"error"``
    float32_names: tuple[str, ...] = ()
    #: what the region does for a float32 name: ``noop`` (autocast off) or ``error``
    float32: str = NOOP
    #: device -> why nothing is claimed for the float32 names there (e.g. what torch does
    #: on that device not yet observed): the float32 item there is skipped with that reason
    float32_unclaimed: Mapping[str, str] = field(default_factory=dict)
    #: what the region does for a name the wrapper does not know (checked with
    #: ``unknown_probe``): ``error`` (raises, as most libraries' wrappers do), ``noop``
    #: (autocast off) or ``fallback`` (autocast on in ``fallback_dtype``)
    unknown: str = ERROR
    #: the dtype a ``fallback`` wrapper falls back to for an unknown name
    fallback_dtype: torch.dtype | None = None
    #: the name used to probe ``unknown`` (something no wrapper accepts)
    unknown_probe: str = "amp_conformance_not_a_precision"
    #: precision names whose region takes the autocast dtype already set when it is made
    #: (``torch.autocast`` with ``dtype=None``): inside another region that region's dtype,
    #: elsewhere the thread's (``precisions`` gives the device default, the dtype expected
    #: where nothing else was set)
    ambient_dtype: tuple[str, ...] = ()
    #: device -> why the wrapper claims to do nothing there (a no-op by design): the checks
    #: hold it to leaving autocast off on that device instead of to autocast's state
    noop_devices: Mapping[str, str] = field(default_factory=dict)
    #: whether the object ``make`` returns also works as a function decorator (the
    #: decorator check)
    decorator: bool = False
    #: why one region object cannot be entered twice (e.g. a generator-based context
    #: manager, with its source line); empty: reusable. The reuse check holds a single-use
    #: region to refusing a second entry, a reusable one to working as the first time
    single_use: str = ""
    #: whether the region must clear the cast cache at its outermost exit (the cache check;
    #: False only for a wrapper that documents otherwise)
    clears_cache: bool = True
    #: the library and version checked, for the report and docs/wrappers.md
    library: str = ""
    version: str = ""


@dataclass(frozen=True)
class ForwardDecorator:
    """A wrapper that decorates a forward function in the manner of ``custom_fwd``."""

    #: the wrapper's name in item ids and the report
    name: str
    #: ``decorate(fn)`` -> the decorated forward (called on a plain function taking tensors)
    decorate: Callable[[Callable[..., Any]], Callable[..., Any]]
    #: the device types the wrapper claims to support at all
    devices: tuple[str, ...]
    #: the dtype floating inputs are cast to inside an enabled region on the devices of
    #: ``casts_on`` (the cast check: every floating input, positional and keyword); None,
    #: with no ``casts_on``: it casts nothing (``custom_fwd`` without ``cast_inputs``: the
    #: forward runs in the caller's autocast state, inputs as sent)
    cast_dtype: torch.dtype | None = None
    #: the device types where the wrapper claims to cast; elsewhere inputs must pass as they
    #: are (the no-cast check)
    casts_on: tuple[str, ...] = ()
    #: whether autocast is off inside the decorated forward while it casts (the inside
    #: check, custom_fwd's behaviour)
    disables_autocast: bool = True
    #: extra keywords the decorated forward accepts and consumes, with a value to pass in
    #: the keyword check (e.g. speechbrain's ``force_allow_autocast``); ``{}``: none
    extra_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: optional ``decorate_backward(fn)`` for the backward of an autograd.Function whose
    #: forward is decorated (custom_bwd's role): the backward check requires backward to
    #: run in the forward's autocast state
    decorate_backward: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    library: str = ""
    version: str = ""


def tensor(*shape: int, device: str, seed: int = 5) -> torch.Tensor:
    """A seeded float32 tensor on ``device`` for a declaration's ``inputs`` (inside the fake
    device's FakeTensorMode, where nothing can be copied onto it, a fake one)."""
    from torch._guards import detect_fake_mode

    if detect_fake_mode() is not None:
        return torch.empty(*shape, device=device)
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def _one_input(device: str) -> tuple[torch.Tensor, ...]:
    return (tensor(4, 8, device=device),)


def float32_body(*inputs: torch.Tensor) -> torch.Tensor:
    """The computation a context-manager island runs (the caller's part of the contract:
    its inputs cast to float32): ops autocast would run in lower precision and in float32."""
    x = inputs[0].float()
    y = x @ x.mT  # its value, not only its softmax, reaches the output: a lower-precision
    # product shows in the numerics check
    return (y.sum(-1) + torch.softmax(y, dim=-1).amax(-1)
            + torch.nn.functional.layer_norm(x, x.shape[-1:]).mean(-1))


@dataclass(frozen=True)
class Float32Island:
    """A wrapper that leaves autocast for a computation of its own: in float32 (its inputs
    cast up) or, with ``core="input"``, in its input's dtype. Declare ``build`` for a
    function or module (``build(device)`` -> the callable, e.g. ``lambda d: Layer(8).to(d)``)
    or ``context`` for a context manager (``context(device)`` -> a fresh one, run around
    :func:`float32_body`, which casts its inputs itself).

    The checks call the island many times (in regions of each amp dtype, nested, outside any
    region, once per other device's state), differentiate it and run it while an op inside
    raises: ``build`` and ``inputs`` must give tensors without autograd history (made under
    ``torch.no_grad()``, or leaves), or the second backward fails; a declaration holding one
    is refused with a :class:`DeclarationError` naming ``build`` or ``inputs``."""

    name: str
    devices: tuple[str, ...]
    build: Callable[[str], Callable[..., Any]] | None = None
    context: Callable[[str], AbstractContextManager] | None = None
    #: ``inputs(device)`` -> the float32 tensors the island takes (its floating ones are
    #: also sent in each amp dtype, as a region's activations arrive, unless ``arguments``
    #: says otherwise); integer ones pass as they are
    inputs: Callable[[str], tuple[torch.Tensor, ...]] = _one_input
    #: one rule per input of ``inputs``, how the checks send it: ``None`` (as a region's
    #: activation: in the region's amp dtype, and in float32), a dtype (always in that dtype:
    #: an input the library only ever makes so, e.g. the exp of a float32 parameter), or
    #: ``make(x, dtype)`` (the author's builder: the input as the library makes it from the
    #: float32 ``x`` when its activations are in ``dtype``). Empty: every input ``None``
    arguments: tuple[Any, ...] = ()
    #: the output's dtype: ``float32``, ``input`` (cast back to its first floating input's)
    #: or ``region`` (the caller's region's dtype, float32 where none is on); a tuple gives
    #: one per floating output tensor, in order
    returns: str | tuple[str, ...] = FLOAT32
    #: a hand-written float32 computation, ``reference(*inputs)`` on float32 inputs with
    #: autocast off (with ``core="input"``: on the inputs as sent, in their dtype; None: the
    #: island itself, called outside any region)
    reference: Callable[..., Any] | None = None
    #: the amp dtypes whose regions it leaves (a helper that leaves only bfloat16 regions:
    #: ``(torch.bfloat16,)``); empty: every amp dtype. The others' items are skipped
    amp_dtypes: tuple[torch.dtype, ...] = ()
    #: what it computes in before its float32 core (the first op computing in float32):
    #: ``None`` (nothing before it: every op in float32), ``input`` (its first floating
    #: input's dtype, e.g. a norm taken before the cast) or ``region`` (the caller's region's
    #: dtype, e.g. a projection the caller's autocast runs)
    before: str | None = None
    #: what it computes in after its float32 core (from the first cast of a value the core
    #: computed to another dtype): ``None`` (nothing: every op computes in float32, its
    #: result cast at most), ``input`` (its first floating input's dtype, e.g. a loss's
    #: ``1 - ssim``) or ``region`` (the caller's region's dtype: the core's result goes on
    #: in the caller's autocast, e.g. an einsum after a float32 Cholesky); a tuple gives one
    #: per floating output tensor, in order
    ending: str | tuple[str, ...] | None = None
    #: what its core computes in: ``float32`` (its inputs cast up) or ``input`` (it leaves
    #: autocast and computes in its first floating input's dtype, e.g. a norm under
    #: ``autocast(enabled=False)`` that never upcasts; a ``build`` island, nothing before or
    #: after it, declaring what it returns; its values and gradients held to the same
    #: computation in that dtype outside autocast)
    core: str = FLOAT32
    library: str = ""
    version: str = ""

    def island(self, device: str) -> Callable[..., Any]:
        """The callable the checks call (the context manager around its body)."""
        if self.build is not None:
            return self.build(device)
        make = self.context

        def run(*inputs: torch.Tensor) -> Any:
            with make(device):
                return float32_body(*inputs)
        return run


@dataclass(frozen=True)
class RegionRunner:
    """A wrapper that runs the user's code inside an autocast region of its own:
    ``runs(body, precision, device)`` has the library call ``body()`` where it calls the
    model (e.g. one step of a trainer whose model's forward is ``body``), letting what
    ``body`` raises reach the caller."""

    name: str
    runs: Callable[[Callable[[], Any], str, str], Any]
    devices: tuple[str, ...]
    #: precision name -> the autocast dtype ``body`` must see on the device
    precisions: Mapping[str, torch.dtype]
    #: precision names whose region takes the autocast dtype already set when it is entered
    #: (``torch.autocast`` with ``dtype=None``): inside another region that region's dtype
    #: (``precisions`` gives the one expected where nothing else was set)
    ambient_dtype: tuple[str, ...] = ()
    library: str = ""
    version: str = ""


@dataclass(frozen=True)
class RegionSwap:
    """A context manager that switches the dtype of the region it is entered in
    (``make(device)`` -> a fresh one): inside, autocast stays on in ``to``; on exit the
    region's dtype is back. Outside any enabled region it does nothing (``outside="noop"``:
    autocast stays off) or raises (``"error"``)."""

    name: str
    make: Callable[[str], AbstractContextManager]
    devices: tuple[str, ...]
    #: the dtype the region computes in inside the swap
    to: torch.dtype = torch.bfloat16
    outside: str = NOOP
    library: str = ""
    version: str = ""


@dataclass(frozen=True)
class Predicate:
    """A yes/no helper: ``answers(x)`` is whether autocast is on for the device of ``x``
    (a tensor, its ``torch.device`` or its device type, as ``takes`` says), whatever the
    other devices' states and the region's amp dtype."""

    name: str
    answers: Callable[[Any], bool]
    devices: tuple[str, ...]
    takes: str = TENSOR
    library: str = ""
    version: str = ""


def documented_step(scaler: Any, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                    parameters: Any, clip: float | None) -> None:
    """GradScaler's documented order: scale, backward, (unscale_, clip_grad_norm_), step,
    update (the gradscaler family's ``step`` and ``clip`` orders)."""
    scaler.scale(loss).backward()
    if clip is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, clip)
    scaler.step(optimizer)
    scaler.update()


@dataclass(frozen=True)
class Scaler:
    """A loss scaler: ``make(device)`` -> a fresh one with ``state_dict()`` and
    ``load_state_dict()`` (a GradScaler, a subclass, or a helper around one), and
    ``step(scaler, loss, optimizer, parameters, clip)`` one training step with it (scale,
    backward, with ``clip`` not None unscale_ and clip_grad_norm_ to it, step, update):
    :func:`documented_step` for the GradScaler API, a lambda for a helper (timm's
    ``NativeScaler``: ``s(loss, opt, clip_grad=clip, parameters=params)``)."""

    name: str
    make: Callable[[str], Any]
    devices: tuple[str, ...]
    step: Callable[..., Any] = documented_step
    #: whether ``step`` clips (the unscale-once check needs it)
    clips: bool = True
    library: str = ""
    version: str = ""


Wrapper = (RegionFactory | RegionRunner | ForwardDecorator | Float32Island | RegionSwap
           | Predicate | Scaler)
KINDS = (RegionFactory, RegionRunner, ForwardDecorator, Float32Island, RegionSwap, Predicate,
         Scaler)


def _require(ok: bool, wrapper: str, name: str, problem: str) -> None:
    if not ok:
        raise DeclarationError(wrapper, name, problem)


def _devices(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(d, str) for d in value)


def _precisions(wrapper: RegionFactory | RegionRunner) -> None:
    _require(isinstance(wrapper.precisions, Mapping) and bool(wrapper.precisions) and all(
        isinstance(k, str) and v in (torch.float16, torch.bfloat16)
        for k, v in wrapper.precisions.items()), wrapper.name, "precisions",
        "expected {name: torch.float16 or torch.bfloat16}, at least one")


def validate(wrapper: Any) -> Wrapper:
    """``wrapper`` if it is a well-formed declaration; else DeclarationError naming the field."""
    if not isinstance(wrapper, KINDS):
        raise DeclarationError(repr(wrapper)[:60], "type", "expected a RegionFactory, a "
                               "RegionRunner, a ForwardDecorator, a Float32Island, a "
                               "RegionSwap, a Predicate or a Scaler, got "
                               f"{type(wrapper).__name__}")
    name = wrapper.name
    _require(isinstance(name, str) and bool(name.strip()) and "[" not in name and " " not in name,
             str(name), "name", "expected a non-empty name without spaces or brackets")
    _require(_devices(wrapper.devices), name, "devices", "expected a non-empty tuple of "
             "device types")
    if isinstance(wrapper, RegionFactory):
        _require(callable(wrapper.make), name, "make", "expected a callable")
        _precisions(wrapper)
        _require(wrapper.float32 in (NOOP, ERROR), name, "float32", f"expected {NOOP!r} or "
                 f"{ERROR!r}, got {wrapper.float32!r}")
        _require(wrapper.unknown in BEHAVIOURS, name, "unknown",
                 f"expected one of {', '.join(BEHAVIOURS)}, got {wrapper.unknown!r}")
        _require(wrapper.unknown != FALLBACK or wrapper.fallback_dtype is not None, name,
                 "fallback_dtype", "a fallback wrapper must say the dtype it falls back to")
        _require(isinstance(wrapper.float32_unclaimed, Mapping) and all(
            d in wrapper.devices and isinstance(v, str) and v.strip()
            for d, v in wrapper.float32_unclaimed.items()), name, "float32_unclaimed",
            "expected {claimed device: why nothing is claimed for the float32 names there}")
        _require(isinstance(wrapper.noop_devices, Mapping) and all(
            isinstance(v, str) and v.strip() for v in wrapper.noop_devices.values()), name,
            "noop_devices", "expected {device: why it does nothing there}")
        _require(isinstance(wrapper.ambient_dtype, tuple) and all(
            n in wrapper.precisions for n in wrapper.ambient_dtype), name, "ambient_dtype",
            "expected a tuple of names of precisions")
        _require(isinstance(wrapper.single_use, str), name, "single_use",
                 "expected why the region object is single-use, or an empty string")
    elif isinstance(wrapper, RegionRunner):
        _require(callable(wrapper.runs), name, "runs", "expected runs(body, precision, device)")
        _precisions(wrapper)
        _require(isinstance(wrapper.ambient_dtype, tuple) and all(
            n in wrapper.precisions for n in wrapper.ambient_dtype), name, "ambient_dtype",
            "expected a tuple of names of precisions")
    elif isinstance(wrapper, Float32Island):
        _island(wrapper)
    elif isinstance(wrapper, (RegionSwap, Predicate, Scaler)):
        _new_shape(wrapper)
    else:
        _forward(wrapper)
    return wrapper


def _forward(wrapper: ForwardDecorator) -> None:
    name = wrapper.name
    _require(callable(wrapper.decorate), name, "decorate", "expected a callable")
    _require(isinstance(wrapper.devices, tuple) and wrapper.devices, name, "devices",
             "expected a non-empty tuple of device types")
    _require(wrapper.cast_dtype in (None, torch.float32, torch.float16, torch.bfloat16,
                                    torch.float64), name, "cast_dtype",
             f"expected a floating dtype or None, got {wrapper.cast_dtype!r}")
    _require(isinstance(wrapper.casts_on, tuple) and all(
        d in wrapper.devices for d in wrapper.casts_on), name, "casts_on",
        "expected a tuple of claimed devices")
    _require((wrapper.cast_dtype is None) == (not wrapper.casts_on), name, "casts_on",
             "a decorator that casts names its cast_dtype and the devices it casts on "
             "(casts_on); one that casts nothing (custom_fwd without cast_inputs) "
             "declares neither")
    _require(isinstance(wrapper.extra_kwargs, Mapping) and all(
        isinstance(k, str) for k in wrapper.extra_kwargs), name, "extra_kwargs",
        "expected {keyword: value}")
    _require(wrapper.decorate_backward is None or callable(wrapper.decorate_backward),
             name, "decorate_backward", "expected a callable or None")


def _island(wrapper: Float32Island) -> None:
    name = wrapper.name
    _require((wrapper.build is None) != (wrapper.context is None), name, "build",
             "declare exactly one of build (a function or module) and context (a context "
             "manager)")
    _require(wrapper.build is None or callable(wrapper.build), name, "build",
             "expected build(device) -> the island")
    _require(wrapper.context is None or callable(wrapper.context), name, "context",
             "expected context(device) -> a context manager")
    _require(callable(wrapper.inputs), name, "inputs", "expected inputs(device) -> tensors")
    returns = wrapper.returns if isinstance(wrapper.returns, tuple) else (wrapper.returns,)
    _require(bool(returns) and all(r in RETURNS for r in returns), name, "returns",
             f"expected one of {', '.join(RETURNS)} or a tuple of them, got "
             f"{wrapper.returns!r}")
    _require(wrapper.reference is None or callable(wrapper.reference), name, "reference",
             "expected a callable or None")
    _require(isinstance(wrapper.amp_dtypes, tuple) and all(
        d in (torch.float16, torch.bfloat16) for d in wrapper.amp_dtypes), name,
        "amp_dtypes", "expected a tuple of torch.float16 and torch.bfloat16 (empty: all)")
    ending = wrapper.ending if isinstance(wrapper.ending, tuple) else (wrapper.ending,)
    _require(wrapper.ending is None or (bool(ending) and all(e in RETURNS for e in ending)),
             name, "ending", f"expected None, one of {', '.join(RETURNS)} or a tuple of "
             f"them, got {wrapper.ending!r}")
    _require(wrapper.before is None or wrapper.before in PARTS, name, "before",
             f"expected None or one of {', '.join(PARTS)}, got {wrapper.before!r}")
    _require(wrapper.core in (FLOAT32, INPUT), name, "core",
             f"expected {FLOAT32!r} or {INPUT!r}, got {wrapper.core!r}")
    _require(wrapper.core == FLOAT32 or (wrapper.build is not None and wrapper.before is None
                                         and wrapper.ending is None), name, "core",
             "an island computing in its input's dtype is a build island (a context one runs "
             "the float32 body) with no part before or after its core")
    _require(isinstance(wrapper.arguments, tuple) and all(
        a is None or callable(a) or a in (torch.float32, torch.float16, torch.bfloat16,
                                          torch.float64) for a in wrapper.arguments),
        name, "arguments", "expected a tuple with one rule per input: None (sent as a "
        "region's activation), a floating dtype (always sent so) or make(x, dtype)")


def _new_shape(wrapper: RegionSwap | Predicate | Scaler) -> None:
    name = wrapper.name
    if isinstance(wrapper, RegionSwap):
        _require(callable(wrapper.make), name, "make", "expected make(device) -> a context "
                 "manager")
        _require(wrapper.to in (torch.float16, torch.bfloat16), name, "to",
                 f"expected torch.float16 or torch.bfloat16, got {wrapper.to!r}")
        _require(wrapper.outside in (NOOP, ERROR), name, "outside",
                 f"expected {NOOP!r} or {ERROR!r}, got {wrapper.outside!r}")
    elif isinstance(wrapper, Predicate):
        _require(callable(wrapper.answers), name, "answers", "expected answers(x) -> bool")
        _require(wrapper.takes in TAKES, name, "takes",
                 f"expected one of {', '.join(TAKES)}, got {wrapper.takes!r}")
    else:
        _require(callable(wrapper.make), name, "make", "expected make(device) -> a scaler")
        _require(callable(wrapper.step), name, "step",
                 "expected step(scaler, loss, optimizer, parameters, clip)")
        _require(isinstance(wrapper.clips, bool), name, "clips", "expected True or False")
