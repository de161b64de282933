"""The GradScaler tier's matrices, as data: the unscale calls, the update-scale sequences,
the optimizers of the training check and the sparse-gradient cases.

Every case has a stable id (the suite's item ids are built from them) and says, in its
own words, why it is there; the logic that runs a case lives in ``kernels.py``,
``scaler.py`` and ``training.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

INF = float("inf")
NAN = float("nan")

#: name -> (how it is written in messages, how it is taken from the base tensor)
#: (views are taken with view ops, not indexing, which fake tensors of an absent device refuse)
_SLICE = torch.ops.aten.slice.Tensor
VIEWS: dict[str, tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = {
    "dense": ("", lambda t: t),
    "t": (".t()", lambda t: t.t()),
    "cols": ("[:, :5]", lambda t: t.narrow(1, 0, 5)),
    "step": ("[::2, 1::3]", lambda t: _SLICE(_SLICE(t, 0, 0, None, 2), 1, 1, None, 3)),
    "permute": (".permute(2, 0, 1)", lambda t: t.permute(2, 0, 1)),
}

Plant = tuple[tuple[int, ...], float]


def _value_name(value: float) -> str:
    if value != value:
        return "nan"
    return "inf" if value > 0 else "-inf"


@dataclass(frozen=True)
class Grad:
    """One gradient of an unscale call: a base tensor of ``dtype`` and ``shape`` (seeded
    random values), non-finite values planted at indices of the base, then ``view`` taken
    of it (so a planted value may lie outside the view the kernel is given)."""

    dtype: str = "float32"
    shape: tuple[int, ...] = (20, 20)
    view: str = "dense"
    plant: tuple[Plant, ...] = ()

    def describe(self) -> str:
        text = f"{self.dtype}[{','.join(map(str, self.shape))}]{VIEWS[self.view][0]}"
        if self.view != "dense":
            text += " (non-contiguous)"
        for index, value in self.plant:
            text += f" with {_value_name(value)} at base index {index}"
        return text


F32 = Grad()


@dataclass(frozen=True)
class UnscaleCase:
    """One call of ``_amp_foreach_non_finite_check_and_unscale_``."""

    id: str
    why: str
    grads: tuple[Grad, ...]
    inv_scale: float = 0.25
    found_inf_before: float = 0.0


def _nonfinite(value: float, dtype: str = "float32", view: str = "dense") -> Grad:
    return Grad(dtype=dtype, view=view, plant=(((2, 2), value),))


UNSCALE_CASES: tuple[UnscaleCase, ...] = (
    UnscaleCase("finite", "finite float32 gradients are multiplied by inv_scale", (F32, F32)),
    UnscaleCase("inf", "an inf gradient sets found_inf", (F32, _nonfinite(INF))),
    UnscaleCase("neg_inf", "a -inf gradient sets found_inf", (F32, _nonfinite(-INF))),
    UnscaleCase("nan", "a nan gradient sets found_inf", (F32, _nonfinite(NAN))),
    UnscaleCase("float16", "low-precision (float16) gradients", (Grad("float16"),) * 2),
    UnscaleCase("float16-inf", "an inf in a float16 gradient",
                (Grad("float16"), _nonfinite(INF, "float16"))),
    UnscaleCase("bfloat16", "low-precision (bfloat16) gradients", (Grad("bfloat16"),) * 2),
    UnscaleCase("bfloat16-nan", "a nan in a bfloat16 gradient",
                (Grad("bfloat16"), _nonfinite(NAN, "bfloat16"))),
    UnscaleCase("several", "several gradients of different sizes in one call",
                (F32, Grad(shape=(1,)), Grad(shape=(3, 5, 7)), Grad(shape=(0,)), F32)),
    UnscaleCase("several-nan-last", "a nan in the last of several gradients",
                (F32, Grad(shape=(1,)), Grad(shape=(3, 5, 7)), _nonfinite(NAN))),
    UnscaleCase("large-inf-last", "an inf in the last element of a large gradient (a "
                "kernel working in chunks must reach the tail)",
                (Grad(shape=(70001,), plant=(((70000,), INF),)),)),
    UnscaleCase("mixed-float32-float16", "float32 and float16 gradients in one call",
                (F32, Grad("float16"), F32)),
    UnscaleCase("mixed-float32-float16-nan", "a nan in the float16 gradient of a "
                "mixed-dtype call", (F32, _nonfinite(NAN, "float16"), F32)),
    UnscaleCase("mixed-float32-float16-bfloat16", "float32, float16 and bfloat16 gradients "
                "in one call", (F32, Grad("float16"), Grad("bfloat16"))),
    UnscaleCase("mixed-float32-float16-bfloat16-inf", "an inf in the bfloat16 gradient of a "
                "mixed-dtype call", (F32, Grad("float16"), _nonfinite(INF, "bfloat16"))),
    UnscaleCase("transposed", "a transposed (non-contiguous) gradient",
                (F32, Grad(view="t"))),
    UnscaleCase("sliced", "column slices (non-contiguous) of gradients",
                (F32, Grad(view="cols"), Grad(view="cols"))),
    UnscaleCase("stepped", "a gradient viewed with steps in both dimensions",
                (Grad(view="step"), Grad("float16", view="step"))),
    UnscaleCase("permuted", "a permuted 3-d gradient",
                (Grad(shape=(4, 5, 6), view="permute"),)),
    UnscaleCase("sliced-inf", "an inf inside a column slice",
                (F32, _nonfinite(INF, view="cols"))),
    UnscaleCase("stepped-nan", "a nan inside a stepped view",
                (Grad(view="step", plant=(((4, 7), NAN),)),)),
    UnscaleCase("view-excludes-inf", "an inf in the base tensor but outside the view the "
                "kernel is given must not set found_inf",
                (F32, Grad(view="cols", plant=(((2, 7), INF),)))),
    UnscaleCase("inv_scale-one", "inv_scale 1.0 leaves gradients unchanged",
                (F32, Grad("float16")), inv_scale=1.0),
    UnscaleCase("inv_scale-third", "an inv_scale that is no power of two (1/3 in float32): "
                "the product is rounded once, from float32 arithmetic",
                (F32, Grad("float16")), inv_scale=1 / 3),
    UnscaleCase("inv_scale-third-bfloat16", "inv_scale 1/3 on a bfloat16 gradient",
                (Grad("bfloat16"),), inv_scale=1 / 3),
    UnscaleCase("inv_scale-default", "the default scale's inverse, 2**-16",
                (F32, Grad("float16")), inv_scale=2.0**-16),
    UnscaleCase("found_inf-accumulates", "found_inf already set by an earlier call stays set "
                "after a call with finite gradients", (F32, Grad("float16")),
                found_inf_before=1.0),
)


@dataclass(frozen=True)
class UpdateCase:
    """A sequence of ``_amp_update_scale_`` calls on one scale and growth tracker."""

    id: str
    why: str
    found_inf: tuple[float, ...]
    init_scale: float = 4.0
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 3
    init_tracker: int = 0
    shape: tuple[int, ...] = ()


UPDATE_CASES: tuple[UpdateCase, ...] = (
    UpdateCase("growth", "the scale grows after growth_interval finite steps, and again "
               "after as many more", (0.0,) * 7),
    UpdateCase("backoff", "a non-finite step backs the scale off and resets the tracker",
               (0.0, 0.0, 1.0)),
    UpdateCase("backoff-resets-interval", "after a back-off, growth needs a full "
               "growth_interval of finite steps again", (0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0)),
    UpdateCase("growth_interval-1", "growth_interval 1 grows on every finite step",
               (0.0, 0.0, 1.0, 0.0), growth_interval=1),
    UpdateCase("upstream", "PyTorch's test_grad_scaling_update_scale: growth 2, backoff 0.25, "
               "interval 2, one-element tensors", (0.0, 0.0, 1.0),
               backoff_factor=0.25, growth_interval=2, shape=(1,)),
    UpdateCase("found_inf-sum", "found_inf summed over several optimizers (2.0) still means "
               "non-finite", (0.0, 2.0, 0.0)),
    UpdateCase("tracker-start", "a tracker restored at growth_interval - 1 grows on the next "
               "finite step", (0.0, 0.0), init_tracker=2),
    UpdateCase("no-overflow", "growth that would overflow float32 is not applied (the tracker "
               "still resets)", (0.0, 0.0, 1.0, 0.0), init_scale=2.0**127, growth_interval=1),
    UpdateCase("no-overflow-1e38", "PyTorch's test_grad_scale_will_not_overflow: scale 1e38, "
               "growth 16", (0.0,), init_scale=1e38, growth_factor=16.0, growth_interval=1),
    UpdateCase("odd-factors", "growth 1.5 and backoff 0.75 round to float32 once per step",
               (0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0), init_scale=3.0, growth_factor=1.5,
               backoff_factor=0.75, growth_interval=2),
    UpdateCase("repeated-backoff", "repeated back-offs shrink the scale below 1",
               (1.0,) * 6, init_scale=8.0, backoff_factor=0.25),
)


# -- the training check ----------------------------------------------------------------


@dataclass(frozen=True)
class OptimizerCase:
    """An optimizer of the training check; its hyper-parameters make every step matter
    (momentum and Adam's moments carry a skipped step's effect forward)."""

    id: str
    name: str
    kwargs: dict = field(default_factory=dict)

    def make(self, params, **impl) -> torch.optim.Optimizer:
        return getattr(torch.optim, self.name)(params, **self.kwargs, **impl)


OPTIMIZERS: tuple[OptimizerCase, ...] = (
    OptimizerCase("sgd", "SGD", {"lr": 0.1, "momentum": 0.9}),
    OptimizerCase("adam", "Adam", {"lr": 0.01}),
    OptimizerCase("adamw", "AdamW", {"lr": 0.01, "weight_decay": 0.1}),
)

#: how an optimizer steps: torch.optim's implementations (``fused`` needs the
#: ``fused_optimizers`` capability and takes GradScaler's grad_scale/found_inf path;
#: ``capturable`` keeps the step count on the device, for the devices torch lists)
IMPLEMENTATIONS: dict[str, dict] = {"plain": {"foreach": False}, "foreach": {"foreach": True},
                                    "fused": {"fused": True},
                                    "capturable": {"capturable": True}}
#: the optimizers with a capturable implementation (state kept on the device, for graphs),
#: and the order they train in: each capturable run is a new graph for a lazy backend (on
#: PyTorch/XLA 20-30 s an item), and the orders differ in the scaler's calls, not theirs
CAPTURABLE = tuple(o for o in OPTIMIZERS if o.id in ("adam", "adamw"))
CAPTURABLE_ORDERS = ("clip",)

#: the documented call orders of one scaled training step -> how messages write them
ORDERS: dict[str, str] = {
    "step": "scale -> backward -> step -> update",
    "unscale": "scale -> backward -> unscale_ -> step -> update",
    "clip": "scale -> backward -> unscale_ -> clip_grad_norm_ -> step -> update",
    "two_optimizers": "scale -> backward -> unscale_(first) -> step(first) -> step(second) "
                      "-> update (one scaler)",
}

#: the workflows of PyTorch's GradScaler tests, run scaled and unscaled (``training.py``)
WORKFLOWS: tuple[str, ...] = ("clipping", "clipping-separate-unscale", "penalty",
                              "accumulation", "multiple")


# -- sparse gradients --------------------------------------------------------------------


@dataclass(frozen=True)
class SparseCase:
    """A sparse COO gradient: indices (may repeat: uncoalesced), values, dtype, and the
    found_inf the unscale must report (after coalescing float16 gradients)."""

    id: str
    why: str
    indices: tuple[tuple[int, ...], tuple[int, ...]]
    values: tuple[float, ...]
    dtype: str = "float32"
    found_inf: float = 0.0


SPARSE_CASES: tuple[SparseCase, ...] = (
    SparseCase("float32", "finite sparse gradient", ((0, 1, 1), (2, 0, 2)), (3.0, 4.0, 5.0)),
    SparseCase("float32-inf", "an inf value", ((0, 1, 1), (2, 0, 2)), (16.0, 32.0, INF),
               found_inf=1.0),
    SparseCase("float32-nan", "a nan value", ((0, 1, 1), (2, 0, 2)), (16.0, 32.0, NAN),
               found_inf=1.0),
    SparseCase("float32-uncoalesced", "repeated indices, summed when applied",
               ((0, 1, 0), (2, 0, 2)), (3.0, 4.0, 5.0)),
    SparseCase("float16-uncoalesced", "repeated float16 indices whose sum is finite",
               ((0, 1, 0), (2, 0, 2)), (30000.0, 32.0, 30000.0), dtype="float16"),
    SparseCase("float16-uncoalesced-overflow", "repeated float16 indices whose sum overflows "
               "(64000 + 64000): the scaler must coalesce before checking",
               ((0, 1, 0), (2, 0, 2)), (64000.0, 32.0, 64000.0), dtype="float16",
               found_inf=1.0),
)


def ids(cases) -> list[str]:
    """The ids of a matrix, for ``pytest.mark.parametrize``."""
    return [c.id for c in cases]
