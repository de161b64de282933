"""LSTM, GRU and RNN modules under autocast: output dtypes, and float32 gradients of float32
parameters, packed or not, on every layout the matrix has."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("rnn_modules", "LSTM/GRU/RNN modules under autocast: output dtypes, float32 grads of "
          "float32 parameters"),
)
