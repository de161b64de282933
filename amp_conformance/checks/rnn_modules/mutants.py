"""Mutants of the rnn_modules family."""

from __future__ import annotations

from amp_conformance.checks.mutation import (
    Mutant,
    keep_dtype,
    register,
)

# -- RNN modules ----------------------------------------------------------------------

register(Mutant(
    name="rnn-tanh-linear-kept-fp32",
    description="the cpu autocast kernel of aten::linear casts nothing: an RNN_TANH module "
                "runs, and answers, in float32",
    apply=keep_dtype("linear"),
    expect=("rnn_tanh (RNN_TANH, 1 layer) under torch.autocast('cpu'", "output torch.float32"),
    select="test_forward_dtypes and rnn_tanh",
))

