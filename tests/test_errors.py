"""The errors family (checks/errors) catches an autocast that accepts what it must refuse:
here a CUDA device's bfloat16 without the capability, run without a GPU by making torch
believe CUDA is there; the autocast state is checked to come back as it was."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.amp import autocast_mode

from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

pytestmark = pytest.mark.usefixtures("state_restored")


@pytest.mark.parametrize("has_bf16", [False, True], ids=["no-bf16", "bf16-emulated-off"])
def test_cuda_bfloat16_check_catches_autocast_accepting_it(monkeypatch, has_bf16):
    """The bfloat16 refusal of a CUDA device, run here by making torch believe CUDA is
    there: a GPU without bfloat16, or one with it (the check then emulates one without).
    The real torch.autocast passes; one that ignores the capability is caught."""
    from amp_conformance.checks.errors import check as error_checks

    monkeypatch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: has_bf16)
    cuda = Target("cuda")
    error_checks.check_cuda_bfloat16_unsupported_raises(cuda)
    real_init = autocast_mode.autocast.__init__

    def accepting_init(self, *args, **kwargs):
        with contextlib.suppress(RuntimeError):  # the bug: bfloat16 accepted anyway
            real_init(self, *args, **kwargs)

    monkeypatch.setattr(autocast_mode.autocast, "__init__", accepting_init)
    with pytest.raises(ConformanceFailure, match="was accepted: a CUDA device without"):
        error_checks.check_cuda_bfloat16_unsupported_raises(cuda)
