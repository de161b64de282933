"""An operator library with autocast rules of its own, as users write them: three ops made
with ``torch.library.custom_op``, the first two given a rule for CPU and CUDA with
``torch.library.register_autocast`` (which casts every floating input of the device to one
dtype, whatever the region's):

- ``amplib::scaled_mm`` (a·b·scale) runs in bfloat16;
- ``amplib::unit_norm`` (x / ‖x‖) runs in float32;
- ``amplib::exp_sum`` has a kernel written as torchvision writes its own: float32 inside,
  the output back in its input's dtype.

``amp_oplib.toml`` beside it holds them to those rules. Importing
``amp_oplib_broken`` first (``--backend-module amp_oplib_broken``) defines the same ops
with broken rules instead; this module then leaves them alone. The ops themselves are in
``amp_oplib_ops``.
"""

from __future__ import annotations

from amp_oplib_ops import RULES, define

define(RULES)
