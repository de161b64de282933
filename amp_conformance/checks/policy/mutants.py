"""Mutants of the cast policy: one op of each category (PyTorch's lists and the ops they never
touch) given the wrong dtype, an explicit dtype argument dropped, and the fake tier's
policies (a device's policy without the device, ``--fake``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.mutation import (
    AMP,
    FP32,
    NARROWEST,
    Mutant,
    _cast_all,
    _to_amp,
    cast_kernel,
    fake_mutant,
    keep_dtype,
    no_kernel,
    override_kernel,
    patches,
    register,
)
from amp_conformance.core.casting import is_eligible

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


fake_mutant("cuda-mm-kept-fp32",
      "AutocastCUDA kernel of aten::mm casts nothing (stays float32)",
      keep_dtype("mm", "AutocastCUDA"),
      ("torch.mm", "expected torch.float16"),
      "test_policy and torch_16-mm")
fake_mutant("cuda-softmax-in-lower-precision",
      "AutocastCUDA softmax (fp32_set_opt_dtype) runs a float16 input without the float32 "
      "it should default to",
      keep_dtype("softmax.int", "AutocastCUDA"),
      ("torch.softmax", "expected torch.float32"),
      "test_policy and torch_fp32-softmax")


def _softmax_ignores_dtype(redispatch):
    def kernel(self, dim, dtype=None):
        return redispatch(_cast_all(self, torch.float32, lambda t: is_eligible(t, "cuda")), dim)
    return kernel


fake_mutant("cuda-softmax-ignores-explicit-dtype",
      "AutocastCUDA softmax ignores an explicit dtype argument (always float32)",
      lambda: override_kernel("softmax.int", "AutocastCUDA", _softmax_ignores_dtype),
      ("torch.softmax", "expected torch.float16"),
      "test_policy and torch_fp32_opt_dtype-softmax-dtype")
fake_mutant("cuda-vector-norm-no-fp32",
      "AutocastCUDA linalg_vector_norm (behind torch.norm) runs in float16 instead of "
      "appending/defaulting to float32",
      keep_dtype("linalg_vector_norm", "AutocastCUDA"),
      ("torch.norm", "expected torch.float32"),
      "test_policy and torch_fp32-norm")
fake_mutant("cuda-addcmul-promotes-to-narrowest",
      "AutocastCUDA addcmul (promote) casts to the narrowest input type",
      cast_kernel("addcmul", NARROWEST, "AutocastCUDA"),
      ("torch.addcmul", "expected torch.float32"),
      "test_policy and torch_need_autocast_promote-addcmul")
fake_mutant("cuda-binary_cross_entropy-not-banned",
      "AutocastCUDA binary_cross_entropy just redispatches: the banned op runs under autocast",
      keep_dtype("binary_cross_entropy", "AutocastCUDA"),
      ("binary_cross_entropy", "a banned op must raise"),
      "test_policy and banned-binary_cross_entropy")
fake_mutant("cuda-upsample_nearest2d-in-lower-precision",
      "AutocastCUDA upsample_nearest2d (fp32; not in PyTorch's CUDA lists) passes its "
      "lower-precision input through uncast",
      keep_dtype("upsample_nearest2d", "AutocastCUDA"),
      ("torch._C._nn.upsample_nearest2d", "expected torch.float32"),
      "test_policy and nn_fp32-upsample_nearest2d")


# -- the reference-defect verdict (checks/defects.py): for float16 beside bfloat16 the promote
# contract gives float32 and PyTorch today raises (prioritize-mixed-lower-precision); this cat
# promotes every other mix but casts that one to the autocast dtype, so only the entries
# carrying the defect can catch it, and only by failing both accounts

_LOWER = {torch.float16, torch.bfloat16}


def _neither_for_mixed_lower(redispatch: Callable) -> Callable:
    def cat(tensors: Any, dim: int = 0) -> torch.Tensor:
        eligible = [t.dtype for t in tensors if is_eligible(t, "cpu")]
        if _LOWER <= set(eligible):
            to = torch.get_autocast_dtype("cpu")
        else:
            to = functools.reduce(torch.promote_types, eligible) if eligible else None
        cast = [t.to(to) if to is not None and is_eligible(t, "cpu") else t for t in tensors]
        return redispatch(cast, dim)
    return cat


register(Mutant(
    name="cat-mixed-lower-to-amp",
    description="cat of float16 beside bfloat16 cast to the autocast dtype: neither the "
                "contract's float32 nor PyTorch's prioritize error",
    apply=lambda: override_kernel("cat", "AutocastCPU", _neither_for_mixed_lower),
    expect="Nor does it match PyTorch's behaviour today, reference defect "
           "prioritize-mixed-lower-precision",
    select="test_policy and cat",
))


# -- state left behind: what an autocast kernel changes and forgets fails the item, and no
# excuse's proof runs in it (plugin/__init__.py's isolation, plugin/excuses.py)


def _leaves(flag: Callable[[], None]) -> Callable[[Callable], Callable]:
    def factory(redispatch: Callable) -> Callable:
        def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            out = redispatch(*_cast_all((a, b), torch.get_autocast_dtype("cpu"),
                                        lambda t: is_eligible(t, "cpu")))
            flag()
            return out
        return mm
    return factory


register(Mutant(
    name="mm-leaks-grad-mode",
    description="mm's AutocastCPU kernel casts right, then turns grad mode off and never back "
                "on (a backend's cast path that forgets a guard)",
    apply=lambda: override_kernel("mm", "AutocastCPU",
                                  _leaves(lambda: torch.set_grad_enabled(False))),
    expect=("state leaked by", "grad mode: True before, False after"),
    select="test_policy and torch_16-mm",
))
register(Mutant(
    name="mm-leaks-deterministic",
    description="mm's AutocastCPU kernel casts right, then turns deterministic algorithms on "
                "for the rest of the process",
    apply=lambda: override_kernel("mm", "AutocastCPU",
                                  _leaves(lambda: torch.use_deterministic_algorithms(True))),
    expect=("state leaked by", "deterministic algorithms: False before, True after"),
    select="test_policy and torch_16-mm",
))


def _exp_through_float64(redispatch):
    def kernel(self):
        wide = self.to(torch.float64) if is_eligible(self, "mps") else self
        return redispatch(wide).to(torch.float32)  # float32, as the policy says
    return kernel


fake_mutant("mps-exp-through-float64",
            "AutocastMPS exp computes in float64 and returns float32: the dtype the policy "
            "asks for, through a dtype MPS has no tensors of (caught only where the fake "
            "device refuses what MPS refuses)",
            lambda: override_kernel("exp", "AutocastMPS", _exp_through_float64),
            ("torch.exp", "MPS framework doesn't support float64"),
            "test_policy and torch_fp32-exp]", device="mps")


def _conv_transpose3d_through_half(redispatch):
    def kernel(input, weight, bias=None, *args):
        half = [t.to(torch.float16) if t is not None and is_eligible(t, "mps") else t
                for t in (input, weight, bias)]
        return redispatch(*half, *args).to(torch.float32)  # float32, as the policy says
    return kernel


fake_mutant("mps-conv-transpose3d-through-half",
            "AutocastMPS conv_transpose3d computes in float16 and returns float32: the dtype "
            "the policy asks for, through a kernel MPS refuses (no 3-D transposed convolution "
            "in float16 or bfloat16; caught only where the fake device refuses it too)",
            lambda: override_kernel("conv_transpose3d.input", "AutocastMPS",
                                    _conv_transpose3d_through_half),
            ("ConvTranspose 3D with BF16 or FP16 types is not supported on MPS",),
            "test_policy and torch_fp32-conv_transpose3d]", device="mps")


def _norm_dtype_forced_float32(redispatch):
    def kernel(self, ord=2, dim=None, keepdim=False, *, dtype=None):
        wide = self.to(torch.float32) if is_eligible(self, "mps") else self
        return redispatch(wide, ord, dim, keepdim, dtype=torch.float32)
    return kernel


fake_mutant("mps-norm-dtype-forced-float32",
            "AutocastMPS linalg_vector_norm runs in float32 whatever dtype it is asked for: "
            "no longer the narrowing error MPS raises today, nor the dtype asked for",
            lambda: override_kernel("linalg_vector_norm", "AutocastMPS",
                                    _norm_dtype_forced_float32),
            ("linalg_vector_norm-amp-dtype", "float32"),
            "test_policy and linalg_vector_norm-amp-dtype]", device="mps")
