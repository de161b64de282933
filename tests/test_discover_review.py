"""discover cannot bless a departure: a planted bug comes out as a review item under which
it still fails, and a promote op with no autocast kernel is not taken for promote."""

from __future__ import annotations

import torch

from amp_conformance.__main__ import main as cli
from amp_conformance.checks.case import Case
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist

CATALOGUE = mutants()


def _discover(tmp_path, *extra: str) -> dict:
    out = tmp_path / "cuda.toml"
    assert cli(["discover", "--device", "cuda", "--fake", "--amp-dtype", "float16", "-q",
                "--out", str(out), *extra]) == 0
    return {"text": out.read_text(), "entries": {e.id: e for e in oplist.parse_file(out).entries}}


def test_a_planted_fp32_to_lower_bug_is_written_as_a_review_item_that_still_fails(tmp_path):
    undo = CATALOGUE["cuda-softmax-in-lower-precision"].apply()
    try:
        found = _discover(tmp_path)
        softmax = found["entries"]["softmax"]
        assert softmax.policy == "fp32", "the reference expectation must stay active"
        assert "# REVIEW softmax: cuda departs from cuda" in found["text"]
        assert "# [[entry]]  (observed)" in found["text"]  # what the device did, commented out
        case = Case(Target("cuda", fake=True), torch.float16, softmax)
        try:
            check_policy(case)
        except ConformanceFailure as exc:
            assert "expected torch.float32" in str(exc)
        else:
            raise AssertionError("the discovered list let the planted bug pass")
    finally:
        undo()


def test_promote_without_a_kernel_is_a_departure_not_promote(tmp_path):
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("addcmul", torch.library.fallthrough_kernel, "AutocastCUDA")
    try:
        found = _discover(tmp_path)
    finally:
        lib._destroy()
    addcmul = found["entries"]["addcmul"]
    assert addcmul.policy == "promote"
    assert "entered no AutocastCUDA kernel" in found["text"]
    clean = _discover(tmp_path)
    assert "REVIEW addcmul" not in clean["text"]


def test_an_entry_with_a_reference_defect_is_written_as_listed(tmp_path):
    """PyTorch's behaviour today (the addcmul prioritize error, bilinear's bias cast down)
    is one of the entry's two accepted behaviours: discover keeps the entry as listed, the
    contract with its reference_defect, never a banned op or an amp expectation."""
    found = _discover(tmp_path)
    for entry_id in ("addcmul-mixed-lower-precision", "bilinear-float32-bias"):
        entry = found["entries"][entry_id]
        assert entry.category == "torch_need_autocast_promote", entry
        assert entry.reference_defect is not None and entry.expect != "error"
        assert f"REVIEW {entry_id}" not in found["text"]
        assert "float16: reproduced" in entry.note


def test_an_error_outside_seen_under_both_dtypes_matches_both(tmp_path):
    """A call that raises outside autocast with each dtype's own words (PyTorch/XLA's CPU
    fallback: "... not implemented for 'BFloat16'", "... for 'Half'") gets a pattern that
    matches each message, so the written list passes under both autocast dtypes."""
    import re

    from amp_conformance.tools.discover.observe import Observation, Row
    from amp_conformance.tools.discover.write import entry_table

    entry = next(e for e in oplist.load("cpu").entries if e.id == "ctc_loss-IntList")
    words = {"bfloat16": "\"ctc_loss_cpu\" not implemented for 'BFloat16'",
             "float16": "\"ctc_loss_cpu\" not implemented for 'Half'"}
    row = Row(entry, "fp32", {amp: Observation("fp32", ("float32",), outside=None,
                                               outside_error=text, as_reference=True)
                              for amp, text in words.items()})
    table = entry_table(row, ["bfloat16", "float16"], "cpu", restrict=False)
    assert table is not None and table["expect_outside"] == "error"
    for text in words.values():
        assert re.search(table["error_outside"], text), (table["error_outside"], text)
