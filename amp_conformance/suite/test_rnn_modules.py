"""RNN modules (LSTM, GRU, RNN_TANH) under autocast: a small declarative matrix."""

import pytest
import torch

from amp_conformance.checks import defects
from amp_conformance.checks.rnn_modules import check as rnn
from amp_conformance.core.errors import NotApplicable
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import fake_autograd_reason

pytestmark = pytest.mark.amp_check("rnn_modules")

_ROWS = [pytest.param(row, id=row.id) for row in rnn.ROWS]


@pytest.mark.parametrize("row", _ROWS)
def test_forward_dtypes(amp_target, amp_dtype, row, record_property):
    """Output, h_n (and c_n) have the dtype recorded for the device; where PyTorch's own
    cuDNN path gives float16 under bfloat16, that reproduces the reference defect."""
    def check():
        rnn.check_forward_dtypes(amp_target, amp_dtype, row)

    defect = rnn.known_defect(amp_target, amp_dtype)
    with unchanged_autocast_state(amp_target.device, "the check"):
        try:
            if defect is None:
                check()
            else:
                defects.known_departure(defect, check, rnn.every_output(torch.float16),
                                        record_property)
        except NotApplicable as exc:
            pytest.skip(str(exc))


@pytest.mark.parametrize("row", _ROWS)
@pytest.mark.amp_needs("autograd")
def test_backward_grads(amp_target, amp_dtype, row):
    """Backward outside the region gives float32 parameters finite float32 gradients."""
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    with unchanged_autocast_state(amp_target.device, "the check"):
        try:
            rnn.check_backward_grads(amp_target, amp_dtype, row)
        except NotApplicable as exc:
            pytest.skip(str(exc))


def test_lower_precision_weights(amp_target, amp_dtype):
    """CPU: LSTM weights in the amp dtype with a float32 input raise outside autocast and
    run inside (upstream test_autocast_rnn; CPU's oneDNN path)."""
    if amp_target.device != "cpu":
        pytest.skip("not applicable: weights in the amp dtype under autocast are CPU's oneDNN "
                    "LSTM path (upstream test_autocast_rnn is CPU-only)")
    reason = rnn.onednn_lstm_missing(amp_dtype) if rnn.torch.backends.mkldnn.is_available() \
        else "not applicable: this torch build has no oneDNN (the path the case is about)"
    if reason:
        pytest.skip(reason)
    with unchanged_autocast_state("cpu", "the check"):
        rnn.check_lower_precision_weights(amp_dtype)
