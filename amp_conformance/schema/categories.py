"""Op-list categories: each names a cast policy and where the op is called from.

The names follow PyTorch's own autocast test lists (``torch_16``, ``nn_fp32``,
``torch_expect_builtin_promote``...), so an entry reads the same as upstream.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Cast policies. ``lower`` casts eligible inputs to the autocast dtype; ``fp32``
#: to float32; ``fp32_opt_dtype`` is fp32 unless the call passes its own dtype;
#: ``promote`` to the widest eligible input type; ``builtin_promote`` ops have no
#: autocast kernel and rely on type promotion; ``banned`` ops raise under autocast.
POLICIES = ("lower", "fp32", "fp32_opt_dtype", "promote", "builtin_promote", "banned")


@dataclass(frozen=True)
class Category:
    name: str
    policy: str
    #: default namespace the op is called from; None means a Tensor method only.
    namespace: str | None


_TABLE = [
    ("torch_16", "lower", "torch"),
    ("nn_16", "lower", "torch._C._nn"),
    ("linalg_16", "lower", "torch._C._linalg"),
    ("methods_16", "lower", None),
    ("torch_fp32", "fp32", "torch"),
    ("nn_fp32", "fp32", "torch._C._nn"),
    ("linalg_fp32", "fp32", "torch._C._linalg"),
    ("fft_fp32", "fp32", "torch._C._fft"),
    ("special_fp32", "fp32", "torch._C._special"),
    ("methods_fp32", "fp32", None),
    ("torch_fp32_opt_dtype", "fp32_opt_dtype", "torch"),
    ("linalg_fp32_opt_dtype", "fp32_opt_dtype", "torch._C._linalg"),
    ("torch_expect_builtin_promote", "builtin_promote", "torch"),
    ("methods_expect_builtin_promote", "builtin_promote", None),
    ("torch_need_autocast_promote", "promote", "torch"),
    ("banned", "banned", "torch._C._nn"),
]

CATEGORIES: dict[str, Category] = {name: Category(name, p, ns) for name, p, ns in _TABLE}

#: Namespaces an entry may name, mapped to the attribute path below ``torch``.
NAMESPACES = (
    "torch",
    "torch.nn.functional",
    "torch._C._nn",
    "torch.linalg",
    "torch._C._linalg",
    "torch.special",
    "torch._C._special",
    "torch.fft",
    "torch._C._fft",
    # the raw bindings, where the torch.* Python wrapper reroutes the call (torch.norm,
    # torch.stft) and an overload is reachable only through the binding
    "torch._C._VariableFunctions",
    # the dispatcher's own Python entry point, for overloads no binding exposes
    # (e.g. aten::_thnn_fused_lstm_cell)
    "torch.ops.aten",
    "Tensor",
)

#: What the control casts eligible inputs to, and what the output dtype is, per policy.
DEFAULT_CAST = {
    "lower": "amp",
    "fp32": "float32",
    "fp32_opt_dtype": "float32",
    "promote": "widest",
    "builtin_promote": "widest",
    "banned": "none",
}
DEFAULT_EXPECT = {
    "lower": "amp",
    "fp32": "float32",
    "fp32_opt_dtype": "float32",
    "promote": "widest",
    "builtin_promote": None,  # must be given: comparisons give bool, arithmetic the widest type
    "banned": "error",
}
