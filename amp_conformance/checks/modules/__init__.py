"""``torch.nn`` modules under autocast, in every mode, against their computation cast as
the device's op lists say.

Modules take paths of their own under autocast: a fused kernel in eval without grad
(``torch._transformer_encoder_layer_fwd``, ``torch._native_multi_head_attention``), a
native kernel with no autocast rule, a loss on the fp32 lists, parameters cast once and
cached. None of that is visible to the op lists' checks, which call one op. Here each
module runs in train and eval mode, with grad, under ``torch.no_grad()`` and under
``torch.inference_mode()``, inside the device's autocast and against a control: the same
module with autocast off through the reference autocast (each op it calls cast as the
op lists say, fused paths off). Outputs and gradients must have the control's dtypes, and
its values to the autocast dtype's precision (bitwise where nothing is cast).

- ``source``: the modules: ``oplists/modules.toml`` (the default suite: attention,
  transformer layers, RNNs, normalizations, convolutions, linear layers, the losses on the
  fp32 lists), or the inputs of every ModuleInfo of PyTorch's ``module_db`` (opt-in:
  ``--amp-modules``, the first two for train and for eval unless ``--amp-modules-inputs``
  says otherwise); each built afresh, seeded, on the device (on meta and emptied onto a
  fake device).
- ``judge``: one module in one mode, the run inside autocast against the control; the
  fused paths each run took; the outcome (agrees, capability, defect, n/a, failed).
- ``check``: one item per (amp dtype, module), failing with every departing mode and a
  reproduction.
- ``tier``: the opt-in gate and the items' parametrization.
"""

from amp_conformance.core.registry import Check  # noqa: E402 - the declaration follows the docs

CHECKS = (
    Check("modules", "torch.nn modules with a path of their own under autocast (attention, "
          "transformer layers, RNNs, normalizations, convolutions, linear layers, the fp32 "
          "losses), in train and eval, with grad, under no_grad and inference_mode: the "
          "dtypes and values of their computation cast as the op lists say, fused paths "
          "included"),
    Check("modules_db", "opt-in (--amp-modules): every ModuleInfo of the running release's "
          "module_db, its first inputs for train and eval (--amp-modules-inputs), in every "
          "mode, against the same control",
          opt_in="--amp-modules"),
)

from amp_conformance.checks.modules.tier import PARAMS, TIER  # noqa: E402,F401
