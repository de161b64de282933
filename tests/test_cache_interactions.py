"""The cache_interactions family's checks (checks/cache_interactions) fail on a cast cache
that mixes up inference mode, no_grad and retained graphs, naming what broke, and pass on
torch as it is; in-process, with the selftest's mutants applied and undone."""

import pytest
import torch

from amp_conformance.checks.cache_interactions import check as cache
from tests.mutants import CPU, fails, mutant


@pytest.mark.parametrize("name, check", [
    ("cache-keeps-inference-casts", cache.check_inference_mode),
    ("cache-recaches-under-no_grad", cache.check_no_grad_leak),
    ("cache-no_grad-cast-without-history",
     lambda t, d: cache.check_mixed_grad_contexts(t, d, "bitwise")),
])
def test_cache_checks_catch_python_cache_bugs(name, check):
    with mutant(name):
        fails(check, CPU, torch.bfloat16)
    check(CPU, torch.bfloat16)


def test_retain_graph_check_compares_gradients(monkeypatch):
    monkeypatch.setattr(cache, "single_pass_grad", lambda t, d: torch.zeros(8, 8))
    fails(cache.check_retain_graph, CPU, torch.bfloat16, "bitwise",
          words=("three times one clean pass's",))
