"""The comparison rule (core/compare.py) decides as ``torch.testing.assert_close`` does: its
shortcut for equal tensors (``torch.equal``) passes only what assert_close passes, at any
tolerance, and leaves everything else (NaNs, signed zeros, subclasses, complex values,
other dtypes and shapes) to it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_conformance.core.compare import _identical, close, compare
from amp_conformance.core.errors import ConformanceFailure

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
          torch.bool, torch.complex64)
SPECIAL = (0.0, -0.0, 1.0, -1.5, float("nan"), float("inf"), 3e38, 1e-8)


@st.composite
def pairs(draw) -> tuple[torch.Tensor, torch.Tensor]:
    shape = draw(st.sampled_from([(), (3,), (2, 3)]))
    values = draw(st.lists(st.sampled_from(SPECIAL), min_size=6, max_size=6))
    base = torch.tensor(values[:max(1, torch.Size(shape).numel())]).reshape(shape)
    a = base.to(draw(st.sampled_from(DTYPES)))
    how = draw(st.sampled_from(["clone", "other_dtype", "other_shape", "changed", "strided",
                                "parameter"]))
    if how == "clone":
        b = a.clone()
    elif how == "other_dtype":
        b = a.to(draw(st.sampled_from(DTYPES)))
    elif how == "other_shape":
        b = a.reshape(-1)
    elif how == "changed":
        b = a.clone().reshape(-1)
        if b.numel():
            b[0] = draw(st.sampled_from(SPECIAL)) if b.dtype != torch.bool else not b[0]
        b = b.reshape(a.shape)
    elif how == "strided":
        b = a.clone().t().contiguous().t() if a.dim() == 2 else a.clone()
    else:
        b = torch.nn.Parameter(a.clone(), requires_grad=False)
    return a, b


def _assert_close_passes(a: torch.Tensor, b: torch.Tensor, **tolerances) -> bool:
    try:
        torch.testing.assert_close(a, b, **tolerances)
    except AssertionError:
        return False
    return True


@pytest.mark.filterwarnings("ignore:Casting complex values to real")
@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(pairs(), st.sampled_from([{"rtol": 0.0, "atol": 0.0}, {}]))
def test_the_shortcut_passes_only_what_assert_close_passes(pair, tolerances):
    a, b = pair
    if _identical(a, b):
        assert _assert_close_passes(a, b, equal_nan=True, **tolerances)
        assert _assert_close_passes(a, b, **tolerances)
    expected = _assert_close_passes(a, b, equal_nan=True, rtol=0.0, atol=0.0)
    try:
        compare(a, b, "bitwise", None, "out")
    except ConformanceFailure:
        assert not expected
    else:
        assert expected
    assert (close(a, b, **tolerances) is None) == _assert_close_passes(a, b, **tolerances)


@pytest.mark.parametrize(("a", "b", "identical", "close_"), [
    ([1.0, float("nan")], [1.0, float("nan")], False, False),
    ([0.0, 2.0], [-0.0, 2.0], True, True),
], ids=["nan", "signed_zero"])
def test_nans_are_left_to_assert_close_and_signed_zeros_are_equal(a, b, identical, close_):
    a, b = torch.tensor(a), torch.tensor(b)
    assert _identical(a, b) is identical
    compare(a, b, "bitwise", None, "out")  # NaN equals NaN here, as assert_close's equal_nan
    assert (close(a, b) is None) is close_  # close() takes assert_close's defaults
