"""The training checks (checks/training) fail on broken implementations, naming what broke,
and pass on torch as it is; in-process, with the selftest's mutants applied and undone."""

import contextlib

import pytest
import torch

from amp_conformance.checks.api_surface import check as api
from amp_conformance.checks.cache_interactions import check as cache
from amp_conformance.checks.checkpoint import check as checkpointing
from amp_conformance.checks.registry import mutants
from amp_conformance.checks.rnn_modules import check as rnn
from amp_conformance.checks.threads import check as threads
from amp_conformance.core import hardware
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target

CATALOGUE = mutants()

CPU = Target("cpu")
FAKE_CUDA = Target("cuda", fake=True)


@contextlib.contextmanager
def mutant(name):
    before = AutocastState.capture("cpu")
    undo = CATALOGUE[name].apply()
    try:
        yield
    finally:
        undo()
        before.restore()


def _fails(check, *args, words=()):
    with pytest.raises(ConformanceFailure) as info:
        check(*args)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_checkpoint_recompute_in_default_dtype_is_caught():
    """pytorch#71124 on cpu: the non-default float16 is the telling case, bfloat16 is not."""
    with mutant("checkpoint-recompute-default-dtype"):
        _fails(checkpointing.check_checkpoint, CPU, torch.float16, "non_reentrant", False,
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
    _fails(checkpointing.check_checkpoint, CPU, torch.bfloat16, "reentrant", True, "close",
           words=("against the un-checkpointed run",))


def test_thread_checks_catch_a_per_thread_clear():
    with mutant("cache-clear-per-thread"):
        _fails(threads.check_clear_reaches_other_threads, CPU, torch.bfloat16, "bitwise",
               words=("pytorch#86136",))
    threads.check_clear_reaches_other_threads(CPU, torch.bfloat16, "bitwise")
    threads.check_ended_region_not_reused(CPU, torch.float16, "bitwise")


def test_new_thread_check_compares_with_the_default():
    threads.check_new_thread_state(CPU, torch.float16, torch.bfloat16)
    _fails(threads.check_new_thread_state, CPU, torch.float16, torch.float16,
           words=("autocast state is per thread",))
    threads.check_new_thread_state(FAKE_CUDA, torch.bfloat16, torch.float16)


def test_backward_state_check_catches_a_default_dtype_backward():
    with mutant("backward-thread-default-dtype"):
        _fails(threads.check_backward_thread_state, CPU, torch.float16, words=("pytorch#132715",))
    threads.check_backward_thread_state(CPU, torch.float16)


@pytest.mark.parametrize("name, check", [
    ("cache-keeps-inference-casts", cache.check_inference_mode),
    ("cache-recaches-under-no_grad", cache.check_no_grad_leak),
    ("cache-no_grad-cast-without-history",
     lambda t, d: cache.check_mixed_grad_contexts(t, d, "bitwise")),
])
def test_cache_checks_catch_python_cache_bugs(name, check):
    with mutant(name):
        _fails(check, CPU, torch.bfloat16)
    check(CPU, torch.bfloat16)


def test_retain_graph_check_compares_gradients(monkeypatch):
    monkeypatch.setattr(cache, "single_pass_grad", lambda t, d: torch.zeros(8, 8))
    _fails(cache.check_retain_graph, CPU, torch.bfloat16, "bitwise",
           words=("three times one clean pass's",))


def test_rnn_forward_check_catches_an_uncast_linear():
    row = next(r for r in rnn.ROWS if r.id == "rnn_tanh")
    with mutant("rnn-tanh-linear-kept-fp32"):
        _fails(rnn.check_forward_dtypes, CPU, torch.bfloat16, row, words=("output torch.float32",))
    rnn.check_forward_dtypes(CPU, torch.bfloat16, row)
    rnn.check_backward_grads(CPU, torch.bfloat16, row)


def test_rnn_rows_are_declared_once_and_small():
    ids = [r.id for r in rnn.ROWS]
    assert len(ids) == len(set(ids)) and 8 <= len(ids) <= 12
    assert {r.mode for r in rnn.ROWS} == {"LSTM", "GRU", "RNN_TANH"}


def test_rnn_capability_skip_only_for_the_onednn_message(monkeypatch):
    """A missing oneDNN primitive is reported not applicable; nothing else is."""
    lstm = next(r for r in rnn.ROWS if r.id == "lstm")
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(rnn, "onednn_lstm_missing", lambda dtype: "not applicable: probe says so")
    with pytest.raises(NotApplicable, match="probe says so"):
        rnn.check_forward_dtypes(CPU, torch.bfloat16, lstm)
    gru = next(r for r in rnn.ROWS if r.id == "gru")
    rnn.check_forward_dtypes(CPU, torch.bfloat16, gru)  # no LSTM: no probe involved


def test_rnn_probe_propagates_other_errors(monkeypatch):
    class Broken(torch.nn.Module):
        def __init__(self, *args):
            super().__init__()

        def forward(self, x):
            raise RuntimeError("some other failure")

    monkeypatch.setattr(torch.nn, "LSTM", Broken)
    hardware.onednn_lstm.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="some other failure"):
            rnn.onednn_lstm_missing(torch.bfloat16)
    finally:
        hardware.onednn_lstm.cache_clear()


@pytest.mark.parametrize("name, check, args, words", [
    ("legacy-cpu-dtype-getter-diverges", api.check_legacy_getters, (CPU, torch.float16),
     ("pytorch#65786",)),
    ("noarg-is-autocast-enabled-any-device", api.check_noarg_is_autocast_enabled, (CPU,),
     ("CUDA's flag only",)),
    ("any-autocast-ignores-xpu", api.check_any_autocast_enabled, ("xpu",), ("xpu",)),
    ("disabled-cuda-region-warns", api.check_disabled_cuda_region_silent, (None,),
     ("pytorch#67598",)),
    ("vector_norm-casts-float64", api.check_norm_float64, (CPU, torch.bfloat16),
     ("float64 input -> torch.float32",)),
    ("legacy-cuda-custom_fwd-ignores-cast_inputs", api.check_legacy_custom_fwd,
     (FAKE_CUDA, torch.bfloat16), ("cast_inputs",)),
])
def test_api_checks_catch_their_mutants(name, check, args, words):
    if name == "disabled-cuda-region-warns" and torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with mutant(name):
        _fails(check, *args, words=words)


def test_api_checks_pass_on_torch_as_is():
    api.check_legacy_getters(CPU, torch.float16)
    api.check_noarg_is_autocast_enabled(FAKE_CUDA)
    api.check_any_autocast_enabled("xpu")
    api.check_legacy_custom_fwd(FAKE_CUDA, torch.float16)
    api.check_append_dtype_overloads(FAKE_CUDA, torch.float16)
    with pytest.raises(NotApplicable, match="registers none of"):
        api.check_append_dtype_overloads(CPU, torch.bfloat16)


def test_any_autocast_gaps_are_bounded_by_version():
    assert api.any_autocast_gap("mtia", "2.12.1") is not None
    assert api.any_autocast_gap("mtia", "2.13.0") is None
    assert api.any_autocast_gap("mps", "2.13.0") is not None
    assert api.any_autocast_gap("cuda", "2.13.0") is None


def test_device_module_api_check_uses_what_the_module_has(monkeypatch):
    """No in-tree device module has its own autocast getters; a backend's that agrees
    passes, one that disagrees fails."""
    with pytest.raises(NotApplicable, match="no autocast getters or setters"):
        api.check_device_module_api(CPU, torch.float16)
    monkeypatch.setattr(torch.cpu, "get_autocast_dtype", lambda: torch.get_autocast_dtype("cpu"),
                        raising=False)
    monkeypatch.setattr(torch.cpu, "set_autocast_enabled",
                        lambda on: torch.set_autocast_enabled("cpu", on), raising=False)
    api.check_device_module_api(CPU, torch.float16)
    monkeypatch.setattr(torch.cpu, "get_autocast_dtype", lambda: torch.bfloat16, raising=False)
    _fails(api.check_device_module_api, CPU, torch.float16, words=("get_autocast_dtype",))


# -- cuDNN's float16 under bfloat16 (reference defect cudnn-rnn-float16-under-bfloat16) -----


def _outputs_as(monkeypatch, *dtypes):
    """The module's outputs as cuDNN gave them on the H100 (torch 2.11): no GPU needed."""
    def forward(target, dtype, row):
        out, h, c = (torch.zeros(1, dtype=d) for d in dtypes)
        return None, None, (out, (h, c))
    monkeypatch.setattr(rnn, "run_forward", forward)


def _verdict(target, dtype, row):
    from amp_conformance.checks import defects

    recorded: dict = {}
    defect = rnn.known_defect(target, dtype)
    defects.known_departure(defect, lambda: rnn.check_forward_dtypes(target, dtype, row),
                            rnn.every_output(torch.float16), recorded.__setitem__)
    return recorded[defects.PROPERTY]["status"]


def test_cudnn_float16_under_bfloat16_is_the_recorded_defect(monkeypatch):
    cuda, row = Target("cuda"), rnn.ROWS[0]
    assert rnn.known_defect(cuda, torch.bfloat16) == rnn.CUDNN_BF16_DEFECT
    assert rnn.known_defect(cuda, torch.float16) is None
    assert rnn.known_defect(FAKE_CUDA, torch.bfloat16) is None
    assert rnn.known_defect(CPU, torch.bfloat16) is None
    _outputs_as(monkeypatch, torch.float16, torch.float16, torch.float16)
    assert _verdict(cuda, torch.bfloat16, row) == "reproduced"
    _outputs_as(monkeypatch, torch.bfloat16, torch.bfloat16, torch.bfloat16)
    assert _verdict(cuda, torch.bfloat16, row) == "fixed"


@pytest.mark.parametrize("dtypes", [(torch.float16, torch.float16, torch.float32),
                                    (torch.float32,) * 3])
def test_other_rnn_departures_under_bfloat16_still_fail(monkeypatch, dtypes):
    _outputs_as(monkeypatch, *dtypes)
    with pytest.raises(ConformanceFailure, match="expected torch.bfloat16 for every output"):
        _verdict(Target("cuda"), torch.bfloat16, rnn.ROWS[0])
