"""The checkpoint family's check (checks/checkpoint) fails on a broken checkpoint recompute,
naming what broke, and passes on torch as it is; in-process, with the selftest's mutant
applied and undone, or the recompute perturbed by ``monkeypatch``."""

import torch

from amp_conformance.checks.checkpoint import check as checkpointing
from tests.mutants import CPU, fails, mutant


def test_checkpoint_recompute_in_default_dtype_is_caught():
    """pytorch#71124 on cpu: the non-default float16 is the telling case, bfloat16 is not."""
    with mutant("checkpoint-recompute-default-dtype"):
        fails(checkpointing.check_checkpoint, CPU, torch.float16, "non_reentrant", False,
              "bitwise", words=("pytorch#71124", "dtype=bfloat16"))
        checkpointing.check_checkpoint(CPU, torch.bfloat16, "non_reentrant", False, "bitwise")
    checkpointing.check_checkpoint(CPU, torch.float16, "non_reentrant", False, "bitwise")


def test_checkpoint_values_compared_against_the_uncheckpointed_run(monkeypatch):
    """A recompute in the right state but on different weights differs in its gradients."""
    original = checkpointing.runner

    def perturbed(variant):
        run = original(variant)

        def forward(model, x):
            out = run(model, x)
            with torch.no_grad():  # the recompute in backward sees other weights
                for p in model.parameters():
                    p.add_(0.5)
            return out
        return forward

    monkeypatch.setattr(checkpointing, "runner", perturbed)
    fails(checkpointing.check_checkpoint, CPU, torch.bfloat16, "reentrant", True, "close",
          words=("against the un-checkpointed run",))
