"""Deliberately broken autocast implementations, to prove the suite catches them.

A mutant is applied for one run of the suite through the plugin module
``amp_conformance.tools.selftest.plugin`` (``-p amp_conformance.tools.selftest.plugin`` with the mutant's
name in the ``AMP_CONFORMANCE_MUTANT`` environment variable); ``apply()`` returns the
function that undoes it. ``python -m amp_conformance selftest`` runs the whole catalogue,
each mutant in its own process (see :mod:`amp_conformance.tools.selftest.runner`).

Adding a mutant is one ``register(Mutant(...))`` call: what it breaks (``apply``), the
checks that must catch it (``select``, a ``-k`` expression kept narrow so the campaign
stays fast) and the words the failure message must contain (``expect``: the broken op or
property, found in the failure's ``E`` lines, not merely in the test id).

Kinds of breakage, and the helpers that make them:

* an ``Autocast<Device>`` kernel replaced from Python (:func:`override_kernel`):
  :func:`keep_dtype` (casts nothing), :func:`cast_kernel` (casts to the wrong dtype, or
  casts ineligible tensors too, or perturbs the result), :func:`python_cast_cache` (a
  cast cache of the kernel's own, with a caching bug);
* ``torch.autocast`` (``__init__``/``__enter__``/``__exit__``/``__call__``), the cache
  functions, the legacy entry points and ``torch.amp.custom_fwd``/``custom_bwd`` patched
  in Python (:func:`patch`).
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import torch

from amp_conformance.core import devices
from amp_conformance.core.casting import is_eligible, map_tensors, tensors_in

Undo = Callable[[], None]

@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    apply: Callable[[], Undo]
    #: text the failing test's message must contain (the broken op or property); a tuple
    #: means every one of them
    expect: Union[str, tuple[str, ...]]
    #: pytest ``-k`` expression selecting the checks that must catch it
    select: str
    #: further suite options the run needs
    options: tuple[str, ...] = ()
    #: the device type whose suite runs against the mutant
    device: str = "cpu"
    #: whether that suite runs with ``--fake`` (the device's policy without the device)
    fake: bool = False
    #: a known hole in the suite: why it cannot catch this mutant yet. The campaign still
    #: runs it and reports it by name, but a survivor with a gap does not fail the campaign
    #: (``--strict`` makes it); a gap mutant that gets killed is reported as closed.
    gap: str | None = None

    @property
    def expected_texts(self) -> tuple[str, ...]:
        return (self.expect,) if isinstance(self.expect, str) else tuple(self.expect)

    @property
    def tier(self) -> str:
        return f"{self.device} (fake)" if self.fake else self.device

    def suite_options(self) -> list[str]:
        """The suite's options for this mutant's run, ``-k`` excluded."""
        return ["--device", self.device, *(["--fake"] if self.fake else []), *self.options]


CATALOGUE: dict[str, Mutant] = {}


def register(mutant: Mutant) -> Mutant:
    if mutant.name in CATALOGUE:
        raise ValueError(f"mutant {mutant.name!r} registered twice")
    CATALOGUE[mutant.name] = mutant
    return mutant


# -- kernels -------------------------------------------------------------------------


def override_kernel(op: str, dispatch_key: str, kernel_factory: Callable[[Callable], Callable]) -> Undo:
    """Replace the ``dispatch_key`` kernel of ``aten::op`` by ``kernel_factory(redispatch)``.

    ``redispatch`` calls the op below the Autocast key, as the real kernel would after
    casting. The returned function destroys the library, restoring the original kernel.
    """
    name, _, overload = op.partition(".")
    packet = getattr(torch.ops.aten, name)
    target = getattr(packet, overload or "default")
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, dispatch_key))

    def redispatch(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(keyset):
            return target(*args, **kwargs)

    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Warning only once for all operators")
        lib.impl(op, kernel_factory(redispatch), dispatch_key)
    return lib._destroy


def keep_dtype(op: str, dispatch_key: str = "AutocastCPU") -> Callable[[], Undo]:
    """A lower-precision op whose autocast kernel casts nothing (runs in float32)."""
    return lambda: override_kernel(op, dispatch_key, lambda redispatch: redispatch)


def no_kernel(op: str, dispatch_key: str = "AutocastCPU") -> Callable[[], Undo]:
    """A backend with no autocast kernel at all for ``op``: a fallthrough at the key."""
    def apply() -> Undo:
        library = torch.library.Library("aten", "IMPL")
        library.impl(op, torch.library.fallthrough_kernel, dispatch_key)
        return library._destroy
    return apply


def _cast_all(value: Any, dtype: torch.dtype, should_cast: Callable[[torch.Tensor], bool]) -> Any:
    return map_tensors(lambda t: t.to(dtype) if should_cast(t) else t, value)


#: What a kernel casts to, given the device's autocast dtype and the call's tensors.
AMP = "amp"          # the autocast dtype
FP32 = "float32"
NARROWEST = "narrowest"  # the narrowest eligible floating type (promote done backwards)


def _target_dtype(to: str, device: str, tensors: list[torch.Tensor]) -> torch.dtype | None:
    if to == AMP:
        return torch.get_autocast_dtype(device)
    if to == FP32:
        return torch.float32
    if to == NARROWEST:
        sizes = [t.dtype for t in tensors if is_eligible(t, device)]
        return min(sizes, key=lambda d: torch.finfo(d).bits) if sizes else None
    raise ValueError(to)


def one_ulp_up(out: Any) -> Any:
    """Every floating (or complex) element of the output moved by one ulp toward +inf."""
    if isinstance(out, (list, tuple)):
        return type(out)(one_ulp_up(o) for o in out)
    if not isinstance(out, torch.Tensor):
        return out
    if out.is_complex():
        real = torch.view_as_real(out)
        return torch.view_as_complex(torch.nextafter(real, torch.full_like(real, float("inf"))))
    if out.is_floating_point():
        return torch.nextafter(out, torch.full_like(out, float("inf")))
    return out


def cast_kernel(
    op: str,
    to: str,
    dispatch_key: str = "AutocastCPU",
    *,
    also: Callable[[torch.Tensor], bool] = lambda t: False,
    output: Callable[[Any], Any] | None = None,
    drop_kwargs: tuple[str, ...] = (),
    force_kwargs: dict[str, Any] | None = None,
) -> Callable[[], Undo]:
    """An autocast kernel that casts eligible inputs to ``to`` (``AMP``, ``FP32`` or
    ``NARROWEST``), and the tensors ``also`` accepts besides; ``output`` post-processes
    the result; ``drop_kwargs``/``force_kwargs`` edit the call's keyword arguments."""
    device = devices.device_of_dispatch_key(dispatch_key)

    def factory(redispatch: Callable) -> Callable:
        def kernel(*args, **kwargs):
            dtype = _target_dtype(to, device, list(tensors_in((args, kwargs))))
            if dtype is not None:
                def should(t):
                    return is_eligible(t, device) or also(t)
                args = _cast_all(args, dtype, should)
                kwargs = _cast_all(kwargs, dtype, should)
            kwargs = {k: v for k, v in kwargs.items() if k not in drop_kwargs}
            kwargs.update(force_kwargs or {})
            out = redispatch(*args, **kwargs)
            return output(out) if output is not None else out
        return kernel

    return lambda: override_kernel(op, dispatch_key, factory)


def _to_amp(out: Any, device: str = "cpu") -> Any:
    dtype = torch.get_autocast_dtype(device)
    if isinstance(out, (list, tuple)):
        return type(out)(_to_amp(o, device) for o in out)
    return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


# -- Python-level patches ------------------------------------------------------------


def patch(owner: Any, name: str, make: Callable[[Any], Any]) -> Callable[[], Undo]:
    """Replace ``owner.name`` by ``make(original)``; undo puts the original back."""
    def apply() -> Undo:
        had = name in vars(owner) if isinstance(owner, type) else True
        original = vars(owner)[name] if isinstance(owner, type) and had else getattr(owner, name)
        setattr(owner, name, make(getattr(owner, name)))

        def undo() -> None:
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        return undo
    return apply


def patches(*applies: Callable[[], Undo]) -> Callable[[], Undo]:
    """Several patches applied together, undone in reverse."""
    def apply() -> Undo:
        undos = [a() for a in applies]

        def undo() -> None:
            for u in reversed(undos):
                u()
        return undo
    return apply


_AUTOCAST = torch.amp.autocast_mode.autocast


def _wrap_method(after: Callable[..., Any] | None = None,
                 before: Callable[..., Any] | None = None) -> Callable[[Any], Any]:
    """``make`` for :func:`patch`: run ``before(self, *a, **k)`` / ``after(self, result,
    *a, **k)`` around the original method."""
    def make(original):
        @functools.wraps(original)
        def method(self, *args, **kwargs):
            if before is not None:
                before(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            if after is not None:
                after(self, *args, **kwargs)
            return result
        return method
    return make


# ==================================================================================
# The catalogue
# ==================================================================================

# -- wrong policy: one op of each category, including ops PyTorch's lists never touch --

register(Mutant(
    name="mm-kept-fp32",
    description="AutocastCPU kernel of aten::mm runs without casting (stays float32)",
    apply=keep_dtype("mm"),
    expect="torch.mm",
    select="test_policy and torch_16-mm",
))
register(Mutant(
    name="linear-kept-fp32",
    description="AutocastCPU kernel of aten::linear (nn_16) casts nothing",
    apply=keep_dtype("linear"),
    expect=("torch._C._nn.linear", "expected torch.bfloat16"),
    select="test_policy and nn_16-linear",
))
register(Mutant(
    name="cat-no-autocast-kernel",
    description="no AutocastCPU kernel for cat at all: builtin promotion gives the promote "
                "policy's dtypes, so only the kernel-entry observation can tell",
    apply=no_kernel("cat"),
    expect=("torch.cat entered no AutocastCPU kernel",),
    select="test_policy and torch_need_autocast_promote-cat",
))
register(Mutant(
    name="sdpa-kept-fp32",
    description="scaled_dot_product_attention (lower precision on CPU; not in PyTorch's "
                "CPU lists) casts nothing",
    apply=keep_dtype("scaled_dot_product_attention"),
    expect=("scaled_dot_product_attention", "expected torch.bfloat16"),
    select="test_policy and nn_16-scaled_dot_product_attention",
))
register(Mutant(
    name="mse_loss-in-lower-precision",
    description="an fp32 op (nn_fp32 mse_loss) cast to the autocast dtype instead of float32",
    apply=cast_kernel("mse_loss", AMP),
    expect=("torch._C._nn.mse_loss", "expected torch.float32"),
    select="test_policy and nn_fp32-mse_loss",
))
register(Mutant(
    name="max_pool3d-uncast",
    description="max_pool3d (fp32 on CPU; not in PyTorch's CPU lists) passes its "
                "lower-precision input through uncast",
    apply=keep_dtype("max_pool3d"),
    expect=("torch.max_pool3d", "expected torch.float32"),
    select="test_policy and torch_fp32-max_pool3d",
))
register(Mutant(
    name="fft_fft-uncast",
    description="fft_fft (fp32 on CPU; not in PyTorch's CPU lists) passes its lower-precision "
                "input through uncast, where CPU has no kernel for it",
    apply=keep_dtype("fft_fft"),
    expect=("torch._C._fft.fft_fft raised inside autocast", "BFloat16"),
    select="test_policy and fft_fp32-fft_fft and not fft_fft2 and not fft_fftn",
))
register(Mutant(
    name="quantile-result-in-lower-precision",
    description="quantile (fp32 on CPU; not in PyTorch's CPU lists) computes in float32 "
                "but hands back the autocast dtype",
    apply=cast_kernel("quantile", FP32, output=_to_amp),
    expect=("torch.quantile", "expected torch.float32"),
    select="test_policy and torch_fp32-quantile and not scalar",
))
register(Mutant(
    name="cat-promotes-to-narrowest",
    description="promote policy done backwards: cat casts to the narrowest input type",
    apply=cast_kernel("cat", NARROWEST),
    expect=("torch.cat", "expected torch.float32"),
    select="test_policy and torch_need_autocast_promote-cat",
))
register(Mutant(
    name="index_copy-promotes-to-narrowest",
    description="index_copy (promote on CPU; not in PyTorch's CPU lists) casts to the "
                "narrowest input type",
    apply=cast_kernel("index_copy", NARROWEST),
    expect="torch.index_copy",
    select="test_policy and torch_need_autocast_promote-index_copy",
))
register(Mutant(
    name="add-given-lower-precision-policy",
    description="aten::add (no autocast kernel: builtin type promotion) given a "
                "lower-precision autocast kernel",
    apply=cast_kernel("add.Tensor", AMP),
    expect=("torch.add", "expected torch.float32"),
    select="test_policy and torch_expect_builtin_promote-add",
))

# -- wrong numerics: the cast right, the result one ulp off ---------------------------

register(Mutant(
    name="mm-one-ulp-off",
    description="mm cast to the autocast dtype as it should, result moved by one ulp",
    apply=cast_kernel("mm", AMP, output=one_ulp_up),
    expect=("torch.mm", "not equal (bitwise)"),
    select="test_numerics and torch_16-mm",
))
register(Mutant(
    name="linalg_inv-one-ulp-off",
    description="linalg_inv (fp32 on CPU; not in PyTorch's CPU lists) computed in float32, "
                "result moved by one ulp",
    apply=cast_kernel("linalg_inv", FP32, output=one_ulp_up),
    expect=("torch._C._linalg.linalg_inv", "not equal (bitwise)"),
    select="test_numerics and linalg_fp32-linalg_inv and not linalg_inv_ex",
))
register(Mutant(
    name="fft_fft-one-ulp-off",
    description="fft_fft (fp32 on CPU; not in PyTorch's CPU lists) computed in float32, "
                "complex result moved by one ulp",
    apply=cast_kernel("fft_fft", FP32, output=one_ulp_up),
    expect=("torch._C._fft.fft_fft", "not equal (bitwise)"),
    select="test_numerics and fft_fp32-fft_fft",
))

# -- eligibility: tensors autocast must leave alone -----------------------------------

register(Mutant(
    name="mm-casts-float64",
    description="the mm kernel casts float64 inputs to the autocast dtype too",
    apply=cast_kernel("mm", AMP, also=lambda t: t.dtype == torch.float64),
    expect="float64 inputs were cast",
    select="test_float64_is_not_cast",
))
register(Mutant(
    name="cat-casts-integers",
    description="the cat kernel casts integer inputs to the autocast dtype",
    apply=cast_kernel("cat", AMP, also=lambda t: not t.is_floating_point() and t.dtype != torch.bool),
    expect="integer inputs of torch.cat were cast",
    select="test_integer_is_not_cast",
))

# -- region state not restored on exit ------------------------------------------------


def _exit_forgets_outer_dtype() -> Undo:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__exit__

    def broken_exit(self, *exc):
        result = original(self, *exc)
        torch.set_autocast_dtype(self.device, self.fast_dtype)  # the outer dtype is lost
        return result

    cls.__exit__ = broken_exit

    def undo() -> None:
        cls.__exit__ = original

    return undo


register(Mutant(
    name="exit-forgets-outer-dtype",
    description="torch.autocast.__exit__ leaves the inner region's dtype behind",
    apply=_exit_forgets_outer_dtype,
    expect="after the nested",
    select="test_other_dtype_subregion_restores_outer",
))
register(Mutant(
    name="exit-leaves-autocast-enabled",
    description="torch.autocast.__exit__ does not restore the enabled flag",
    apply=patch(_AUTOCAST, "__exit__", _wrap_method(
        after=lambda self, *exc: torch.set_autocast_enabled(self.device, self._enabled))),
    expect="autocast state changed by the check: enabled: False before, True after",
    select="test_region_sets_and_restores_state",
))
register(Mutant(
    name="exit-forgets-cache-flag",
    description="torch.autocast.__exit__ does not restore the cache flag of the outer region",
    apply=patch(_AUTOCAST, "__exit__", _wrap_method(
        after=lambda self, *exc: torch.set_autocast_cache_enabled(self._cache_enabled))),
    expect="cache flag inner False, after inner False",
    select="test_cache_flag_restored_after_subregion",
))


def _exit_skips_restore_on_exception(original):
    @functools.wraps(original)
    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is not None:
            torch.autocast_decrement_nesting()
            return False  # propagates, leaving enabled flag and dtype of the region behind
        return original(self, exc_type, exc_val, exc_tb)
    return __exit__


register(Mutant(
    name="exit-skips-restore-on-exception",
    description="torch.autocast.__exit__ restores nothing when the body raised",
    apply=patch(_AUTOCAST, "__exit__", _exit_skips_restore_on_exception),
    expect="enabled: False before, True after",
    select="test_state_restored_when_body_raises",
))


def _enter_ignores_enabled_false(self, *args) -> None:
    self._enabled = True


register(Mutant(
    name="disabled-subregion-stays-enabled",
    description="torch.autocast(enabled=False) enters an enabled region",
    apply=patch(_AUTOCAST, "__enter__", _wrap_method(before=_enter_ignores_enabled_false)),
    expect="enabled=False subregion",
    select="test_disabled_subregion_restores_outer",
))


def _init_default_float16(original):
    @functools.wraps(original)
    def __init__(self, device_type, dtype=None, *args, **kwargs):
        original(self, device_type, torch.float16 if dtype is None else dtype, *args, **kwargs)
    return __init__


register(Mutant(
    name="default-dtype-float16",
    description="torch.autocast('cpu') without a dtype runs in float16, not the device "
                "default bfloat16",
    apply=patch(_AUTOCAST, "__init__", _init_default_float16),
    expect="without dtype ran in",
    select="test_default_autocast_dtype",
))

# -- the cast cache -------------------------------------------------------------------

register(Mutant(
    name="cache-never-enabled",
    description="torch.autocast.__enter__ switches the cast cache off whatever was asked",
    apply=patch(_AUTOCAST, "__enter__", _wrap_method(
        after=lambda self, *a: torch.set_autocast_cache_enabled(False))),
    expect="should cast a float32 parameter once per outermost autocast region",
    select="test_weight_cast_once_across_forward_and_backward",
))
register(Mutant(
    name="cache-never-cleared",
    description="torch.clear_autocast_cache is a no-op: casts outlive their region",
    apply=patch(torch, "clear_autocast_cache", lambda original: (lambda: None)),
    expect="weight cast 1 times in two regions, expected 2 (cache cleared)",
    select="test_cache_cleared_when_outermost_region_exits",
))


def _exit_always_clears_cache(original):
    @functools.wraps(original)
    def __exit__(self, *exc):
        result = original(self, *exc)
        torch.clear_autocast_cache()  # also when an outer region is still open
        return result
    return __exit__


register(Mutant(
    name="cache-cleared-by-inner-exit",
    description="leaving a nested region clears the cast cache of the outer one",
    apply=patch(_AUTOCAST, "__exit__", _exit_always_clears_cache),
    expect="across a nested region, expected 1",
    select="test_cache_survives_inner_region_exit",
))


def _init_forces_cache(self, *args, **kwargs) -> None:
    self._cache_enabled = True


register(Mutant(
    name="cache_enabled-false-ignored",
    description="torch.autocast(cache_enabled=False) keeps the cast cache on",
    apply=patch(_AUTOCAST, "__init__", _wrap_method(after=_init_forces_cache)),
    expect="cache_enabled=False left the cache on",
    select="test_cache_disabled_casts_every_time",
))



def python_cast_cache(*, under_no_grad: bool = False, non_leaf: bool = False) -> Callable[[], Undo]:
    """The mm kernel with a cast cache of its own, as a backend without PyTorch's C++ cache
    would write it, with one of two bugs: it also caches casts made under no_grad (they
    have no autograd history: pytorch#158232), or it also caches non-leaf tensors."""
    def apply() -> Undo:
        cache: dict[tuple[int, torch.dtype], torch.Tensor] = {}

        def cached(t: torch.Tensor) -> torch.Tensor:
            if not is_eligible(t, "cpu"):
                return t
            dtype = torch.get_autocast_dtype("cpu")
            cacheable = torch.is_autocast_cache_enabled() and t.requires_grad \
                and (t.is_leaf or non_leaf) and (torch.is_grad_enabled() or under_no_grad)
            if not cacheable:
                return t.to(dtype)
            key = (id(t), dtype)
            if key not in cache:
                cache[key] = t.to(dtype)
            return cache[key]

        def factory(redispatch):
            return lambda a, b: redispatch(cached(a), cached(b))

        undo_kernel = override_kernel("mm", "AutocastCPU", factory)
        original_clear = torch.clear_autocast_cache

        def clear() -> None:
            cache.clear()
            original_clear()

        torch.clear_autocast_cache = clear

        def undo() -> None:
            torch.clear_autocast_cache = original_clear
            undo_kernel()
        return undo
    return apply


register(Mutant(
    name="cache-keeps-no_grad-casts",
    description="a Python cast cache for mm that also caches casts made under no_grad, so "
                "later outputs lose their grad_fn (pytorch#158232)",
    apply=python_cast_cache(under_no_grad=True),
    expect="made without autograd history",
    select="test_no_grad_does_not_poison_cache",
))
register(Mutant(
    name="cache-caches-non-leaf",
    description="a Python cast cache for mm that also caches non-leaf tensors",
    apply=python_cast_cache(non_leaf=True),
    expect="a non-leaf tensor was cast 1 times, expected 2 (not cached)",
    select="test_non_leaf_is_not_cached",
))

# -- error paths ----------------------------------------------------------------------


def _init_accepts_invalid_device(original):
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        try:
            original(self, device_type, *args, **kwargs)
        except RuntimeError:  # silently a disabled cpu region
            original(self, "cpu", enabled=False)
    return __init__


register(Mutant(
    name="invalid-device-accepted",
    description="torch.autocast('not a real device') is accepted silently (a disabled region)",
    apply=patch(_AUTOCAST, "__init__", _init_accepts_invalid_device),
    expect="torch.autocast('not a real device') was accepted",
    select="test_invalid_device_string",
))


def _init_accepts_device_object(original):
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        if isinstance(device_type, torch.device):
            device_type = device_type.type
        original(self, device_type, *args, **kwargs)
    return __init__


register(Mutant(
    name="non-string-device-accepted",
    description="torch.autocast(torch.device('cpu')) is accepted instead of raising ValueError",
    apply=patch(_AUTOCAST, "__init__", _init_accepts_device_object),
    expect="torch.autocast(torch.device('cpu')) was accepted",
    select="test_non_string_device_type",
))


def _init_silent(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            original(self, *args, **kwargs)
    return __init__


register(Mutant(
    name="unsupported-dtype-no-warning",
    description="an unsupported autocast dtype disables autocast without the UserWarning",
    apply=patch(_AUTOCAST, "__init__", _init_silent),
    expect="no UserWarning for an unsupported autocast dtype",
    select="test_unsupported_dtype_warns_and_disables",
))


def _init_keeps_enabled(self, device_type, dtype=None, enabled=True, *args, **kwargs) -> None:
    self._enabled = enabled  # warned "Disabling autocast." and did not


register(Mutant(
    name="unsupported-dtype-not-disabled",
    description="an unsupported autocast dtype warns, but autocast stays enabled",
    apply=patch(_AUTOCAST, "__init__", _wrap_method(after=_init_keeps_enabled)),
    expect="it must be off",
    select="test_unsupported_dtype_warns_and_disables",
))


def _call_accepts_anything(original):
    @functools.wraps(original)
    def __call__(self, func):
        if not callable(func):
            return func
        return original(self, func)
    return __call__


register(Mutant(
    name="decorator-accepts-non-callable",
    description="autocast()(tensor) returns the tensor instead of raising TypeError",
    apply=patch(_AUTOCAST, "__call__", _call_accepts_anything),
    expect="torch.autocast('cpu')(a tensor) was accepted",
    select="test_decorator_rejects_non_callable",
))
register(Mutant(
    name="decorator-form-no-op",
    description="the decorator form returns the function undecorated (no region)",
    apply=patch(_AUTOCAST, "__call__", lambda original: (lambda self, func: func)),
    expect="a function decorated with torch.autocast('cpu', dtype=torch.",
    select="test_decorator_form",
))

# -- the legacy entry point -----------------------------------------------------------


def _legacy_init_drops_dtype(original):
    @functools.wraps(original)
    def __init__(self, enabled=True, dtype=torch.bfloat16, cache_enabled=True):
        original(self, enabled=enabled, cache_enabled=cache_enabled)  # dtype dropped
    return __init__


register(Mutant(
    name="legacy-cpu-autocast-drops-dtype",
    description="torch.cpu.amp.autocast(dtype=...) ignores its dtype (runs in bfloat16)",
    apply=patch(torch.cpu.amp.autocast, "__init__", _legacy_init_drops_dtype),
    expect=("torch.cpu.amp.autocast(dtype=torch.float16)", "torch.autocast gave"),
    select="test_legacy and float16 and torch_16-mm",
))


def _legacy_new_silent(original):
    return staticmethod(lambda cls, *args, **kwargs: object.__new__(cls))


register(Mutant(
    name="legacy-cpu-autocast-no-deprecation",
    description="torch.cpu.amp.autocast no longer emits its FutureWarning",
    apply=patch(torch.cpu.amp.autocast, "__new__", _legacy_new_silent),
    expect="emitted no FutureWarning",
    select="test_legacy and torch_16-mm",
))

# -- custom_fwd / custom_bwd ----------------------------------------------------------

_AMP_MODULE = torch.amp.autocast_mode


def _on_torch_amp(name: str, make: Callable[[Any], Any]) -> Callable[[], Undo]:
    """Patch a decorator where users (and the suite) look it up: ``torch.amp.<name>``
    and ``torch.amp.autocast_mode.<name>``."""
    return patches(patch(torch.amp, name, make), patch(_AMP_MODULE, name, make))


def _fwd_ignores_cast_inputs(original):
    @functools.wraps(original)
    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        return original(fwd, device_type=device_type)  # cast_inputs dropped
    return custom_fwd


def _fwd_keeps_autocast(original):
    """cast_inputs honoured, but forward runs in the caller's (enabled) autocast state."""
    @functools.wraps(original)
    def custom_fwd(fwd=None, *, device_type, cast_inputs=None):
        if fwd is None:
            return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

        @functools.wraps(fwd)
        def decorate_fwd(*args, **kwargs):
            args[0]._dtype = torch.get_autocast_dtype(device_type)
            args[0]._fwd_used_autocast = torch.is_autocast_enabled(device_type)
            if cast_inputs is not None and torch.is_autocast_enabled(device_type):
                args = _AMP_MODULE._cast(args, device_type, cast_inputs)
                kwargs = _AMP_MODULE._cast(kwargs, device_type, cast_inputs)
            return fwd(*args, **kwargs)
        return decorate_fwd
    return custom_fwd


def _cast_float64_too(original):
    @functools.wraps(original)
    def _cast(value, device_type, dtype):
        if isinstance(value, torch.Tensor) and value.dtype == torch.float64 \
                and value.device.type == device_type:
            return value.to(dtype)
        if isinstance(value, (list, tuple)):
            return type(value)(_cast(v, device_type, dtype) for v in value)
        if isinstance(value, dict):
            return {k: _cast(v, device_type, dtype) for k, v in value.items()}
        return original(value, device_type, dtype)
    return _cast


def _bwd_ignores_forward_state(original):
    @functools.wraps(original)
    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)
        return bwd  # backward runs in whatever state backward() was called from
    return custom_bwd


def _bwd_default_dtype(original):
    @functools.wraps(original)
    def custom_bwd(bwd=None, *, device_type):
        if bwd is None:
            return functools.partial(custom_bwd, device_type=device_type)

        @functools.wraps(bwd)
        def decorate_bwd(*args, **kwargs):
            # the forward's enabled flag, but the device's default dtype, not the forward's
            with torch.autocast(device_type, enabled=args[0]._fwd_used_autocast):
                return bwd(*args, **kwargs)
        return decorate_bwd
    return custom_bwd


register(Mutant(
    name="custom_fwd-ignores-cast_inputs",
    description="torch.amp.custom_fwd drops cast_inputs: forward gets uncast inputs in the "
                "caller's autocast state",
    apply=_on_torch_amp("custom_fwd", _fwd_ignores_cast_inputs),
    expect="custom_fwd(cast_inputs=...) casts exactly the eligible tensors",
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_fwd-casts-float64",
    description="custom_fwd's cast_inputs casts float64 tensors too",
    apply=patch(_AMP_MODULE, "_cast", _cast_float64_too),
    expect=("custom_fwd(cast_inputs=...) casts exactly the eligible tensors", "torch.float64"),
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_fwd-forward-keeps-autocast",
    description="custom_fwd casts the inputs but runs forward with autocast still enabled",
    apply=_on_torch_amp("custom_fwd", _fwd_keeps_autocast),
    expect="custom_fwd runs forward with autocast off when it casts",
    select="test_cast_inputs",
))
register(Mutant(
    name="custom_bwd-ignores-forward-state",
    description="torch.amp.custom_bwd runs backward in the caller's state, not the forward's",
    apply=_on_torch_amp("custom_bwd", _bwd_ignores_forward_state),
    expect="custom_bwd runs backward with the forward's autocast state",
    select="test_backward_runs_in_forward_state",
))
register(Mutant(
    name="custom_bwd-default-dtype",
    description="custom_bwd re-enters the forward's enabled flag but the device's default "
                "dtype, not the forward's",
    apply=_on_torch_amp("custom_bwd", _bwd_default_dtype),
    expect="custom_bwd runs backward with the forward's autocast state",
    select="test_backward_runs_in_forward_state",
))

# -- explicit dtype arguments ---------------------------------------------------------


def _prod_drops_dtype(redispatch):
    def kernel(self, *args, **kwargs):
        kwargs.pop("dtype", None)  # the asked-for dtype is lost: float32 comes back
        return redispatch(_cast_all(self, torch.float32, lambda t: is_eligible(t, "cpu")), *args,
                          **kwargs)
    return kernel


register(Mutant(
    name="prod-ignores-explicit-dtype",
    description="prod (fp32 on CPU) drops an explicit dtype argument",
    apply=lambda: patches(
        lambda: override_kernel("prod", "AutocastCPU", _prod_drops_dtype),
        lambda: override_kernel("prod.dim_int", "AutocastCPU", _prod_drops_dtype),
    )(),
    expect=("torch.prod", "expected torch.bfloat16"),
    select="test_policy and torch_fp32-prod",
))

# ==================================================================================
# The fake tier: a device's policy without the device (--device cuda --fake)
# ==================================================================================


def _fake(name: str, description: str, apply: Callable[[], Undo], expect, select: str,
          device: str = "cuda") -> Mutant:
    return register(Mutant(name=name, description=description, apply=apply, expect=expect,
                           select=select, device=device, fake=True))


_fake("cuda-mm-kept-fp32",
      "AutocastCUDA kernel of aten::mm casts nothing (stays float32)",
      keep_dtype("mm", "AutocastCUDA"),
      ("torch.mm", "expected torch.float16"),
      "test_policy and torch_16-mm")
_fake("cuda-softmax-in-lower-precision",
      "AutocastCUDA softmax (fp32_set_opt_dtype) runs a float16 input without the float32 "
      "it should default to",
      keep_dtype("softmax.int", "AutocastCUDA"),
      ("torch.softmax", "expected torch.float32"),
      "test_policy and torch_fp32-softmax")


def _softmax_ignores_dtype(redispatch):
    def kernel(self, dim, dtype=None):
        return redispatch(_cast_all(self, torch.float32, lambda t: is_eligible(t, "cuda")), dim)
    return kernel


_fake("cuda-softmax-ignores-explicit-dtype",
      "AutocastCUDA softmax ignores an explicit dtype argument (always float32)",
      lambda: override_kernel("softmax.int", "AutocastCUDA", _softmax_ignores_dtype),
      ("torch.softmax", "expected torch.float16"),
      "test_policy and torch_fp32_opt_dtype-softmax-dtype")
_fake("cuda-vector-norm-no-fp32",
      "AutocastCUDA linalg_vector_norm (behind torch.norm) runs in float16 instead of "
      "appending/defaulting to float32",
      keep_dtype("linalg_vector_norm", "AutocastCUDA"),
      ("torch.norm", "expected torch.float32"),
      "test_policy and torch_fp32-norm")
_fake("cuda-addcmul-promotes-to-narrowest",
      "AutocastCUDA addcmul (promote) casts to the narrowest input type",
      cast_kernel("addcmul", NARROWEST, "AutocastCUDA"),
      ("torch.addcmul", "expected torch.float32"),
      "test_policy and torch_need_autocast_promote-addcmul")
_fake("cuda-addmm-casts-cpu-scalar",
      "AutocastCUDA addmm (lower precision) also casts a cpu tensor of the call: "
      "eligibility ignores the device",
      cast_kernel("addmm", AMP, "AutocastCUDA",
                  also=lambda t: t.is_floating_point() and t.device.type == "cpu"),
      ("torch.addmm: a cpu tensor in the call was cast",),
      "test_other_device_is_not_cast")
_fake("cuda-binary_cross_entropy-not-banned",
      "AutocastCUDA binary_cross_entropy just redispatches: the banned op runs under autocast",
      keep_dtype("binary_cross_entropy", "AutocastCUDA"),
      ("binary_cross_entropy", "a banned op must raise"),
      "test_policy and banned-binary_cross_entropy")
_fake("cuda-upsample_nearest2d-in-lower-precision",
      "AutocastCUDA upsample_nearest2d (fp32; not in PyTorch's CUDA lists) passes its "
      "lower-precision input through uncast",
      keep_dtype("upsample_nearest2d", "AutocastCUDA"),
      ("torch._C._nn.upsample_nearest2d", "expected torch.float32"),
      "test_policy and nn_fp32-upsample_nearest2d")


# -- the other check families ---------------------------------------------------------
# Each family's mutants live in a module of their own beside this one and register
# themselves on import, so a new family adds a module and one name here.
FAMILIES = ("gradscaler", "compile", "training", "backward", "eligibility", "numerics",
            "defects", "wrappers", "opinfo")
for _family in FAMILIES:
    importlib.import_module(f"amp_conformance.tools.selftest.mutants_{_family}")
