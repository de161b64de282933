"""``amp_oplib``'s ops with broken autocast rules (planted: its op list must catch them):
``scaled_mm`` cast to float16 instead of bfloat16, ``unit_norm`` and ``exp_sum`` given no rule
(they run in whatever dtype they get)."""

from __future__ import annotations

import torch
from amp_oplib_ops import define

define({"scaled_mm": torch.float16, "unit_norm": None, "exp_sum": None})
