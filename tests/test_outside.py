"""The outside family's check (checks/outside): what an op does outside autocast is checked
against the op list, an expected error against the message recorded for it."""

import dataclasses

import pytest
import torch

from amp_conformance.checks.case import Case
from amp_conformance.checks.outside.check import check_outside
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from tests.mutants import case_of


def test_outside_error_must_be_the_recorded_one():
    """expect_outside = "error" is checked against the message observed (error_outside): an
    unrelated error outside autocast does not pass for the missing kernel."""
    case = case_of("cpu", "fft_fft", torch.bfloat16)
    check_outside(case)
    other = Case(Target("cpu"), torch.bfloat16,
                 dataclasses.replace(case.entry, error_outside="no such message"))
    with pytest.raises(ConformanceFailure) as info:
        check_outside(other)
    message = str(info.value)
    assert "raised outside autocast RuntimeError: 'Unsupported dtype BFloat16'" in message, message
    assert "error_outside = 'no such message'" in message
    with pytest.raises(oplist.OpListError, match="error_outside"):
        oplist.parse_entry({"id": "x", "op": "fft_fft", "category": "fft_fp32",
                            "args": [{"shape": [8], "dtype": "amp"}], "expect_outside": "error"},
                           "x.toml", 0, "cpu")
    with pytest.raises(oplist.OpListError, match="not a regular expression"):
        oplist.parse_entry({"id": "x", "op": "fft_fft", "category": "fft_fp32",
                            "args": [{"shape": [8], "dtype": "amp"}], "expect_outside": "error",
                            "error_outside": "(unclosed"}, "x.toml", 0, "cpu")
