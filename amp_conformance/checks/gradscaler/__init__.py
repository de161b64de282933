"""GradScaler under autocast: the unscale and update-scale kernels against plain ops and a
model (``kernels``, ``update_property``), the scaler's contract (``scaler``) and what
callers rely on across calls (``protocol``), scaled training against an unscaled control
(``training``), with fused optimizers and with sparse gradients (``sparse``)."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("gradscaler", "GradScaler: the unscale and update-scale kernels against plain ops and "
          "a model, the scaler's contract (its state tensors updated in place, the setters, "
          "the grad_scale/found_inf protocol of an optimizer that unscales itself, one "
          "optimizer's gradients of several dtypes), scaled training against a control "
          "(for-loop, foreach and capturable)"),
    Check("gradscaler_fused", "GradScaler with fused=True SGD/Adam/AdamW in every documented "
          "call order: scaled training against a control, never unscaled twice, an inf or a "
          "nan skips its step", needs_values=True,
          capability="fused_optimizers"),
    Check("gradscaler_sparse", "GradScaler with sparse gradients, including uncoalesced float16 "
          "ones whose sum overflows", needs_values=True, capability="sparse_grads"),
)
