"""The rnn_modules family's checks (checks/rnn_modules) fail on an RNN module run in the wrong
dtypes, naming what broke, and pass on torch as it is; in-process, with the selftest's
mutant applied and undone. cuDNN's float16 outputs under bfloat16 are the recorded defect
(reference defect cudnn-rnn-float16-under-bfloat16), judged here from outputs as cuDNN gave
them, without a GPU."""

import pytest
import torch

from amp_conformance.checks.rnn_modules import check as rnn
from amp_conformance.core import hardware
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.target import Target
from tests.mutants import CPU, FAKE_CUDA, fails, mutant


def test_rnn_forward_check_catches_an_uncast_linear():
    row = next(r for r in rnn.ROWS if r.id == "rnn_tanh")
    with mutant("rnn-tanh-linear-kept-fp32"):
        fails(rnn.check_forward_dtypes, CPU, torch.bfloat16, row, words=("output torch.float32",))
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
