"""A backend module whose AutocastCPU kernel for ``aten::roll`` kills the process (SIGABRT),
as PyTorch/XLA's ``roll`` of an empty tensor does (SIGFPE). No op list names ``roll``, so
nothing but a call of ``torch.roll`` inside autocast meets it (the atlas's isolation test).
"""

from __future__ import annotations

import os

import torch

_LIBRARY = torch.library.Library("aten", "IMPL")
_LIBRARY.impl("roll", lambda *args, **kwargs: os.abort(), "AutocastCPU")
