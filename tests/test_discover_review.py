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


# -- review: the departures grouped, decided per group, failures refused ----------------

def _block(entry_id: str, op: str, category: str, seen: str, observed: list[str],
           args: str = "[{shape = [4, 4]}, {shape = [4, 4]}]") -> str:
    """A REVIEW block as discover writes it (write.py review_item)."""
    what = f"dev departs from cuda ({seen})"
    lines = ["", f"# REVIEW {entry_id}: {what}.",
             "# The cuda expectation below stays active, so the departure fails until",
             "# reviewed; if it is intended, replace the entry with the observed one after it.",
             "[[entry]]", f'id = "{entry_id}"', f'op = "{op}"', f'category = "{category}"',
             f"args = {args}", f'note = "REVIEW: {what}; cuda\'s expectation kept"',
             "# [[entry]]  (observed)", f'# id = "{entry_id}"', f'# op = "{op}"',
             *(f"# {line}" for line in observed), f"# args = {args}"]
    return "\n".join(lines)


NO_KERNEL = "unchanged (entered no AutocastCPU kernel)"
UNCHANGED = ['category = "torch_expect_builtin_promote"', 'expect = "float32"', 'cast = "none"']
#: two ops without an autocast kernel where cuda lowers them (one group), one whose values
#: depart from the control, one that raises for want of a kernel
REVIEWED = "\n".join([
    '# Autocast policy of dev, discovered by `python -m amp_conformance discover --device dev '
    '--backend-module devbackend --reference cuda`', "", "[list]", 'device = "cpu"',
    _block("mm", "mm", "torch_16", f"float16: {NO_KERNEL}; bfloat16: {NO_KERNEL}", UNCHANGED),
    _block("bmm", "bmm", "torch_16", f"float16: {NO_KERNEL}; bfloat16: {NO_KERNEL}", UNCHANGED,
           "[{shape = [2, 4, 4]}, {shape = [2, 4, 4]}]"),
    _block("addmm", "addmm", "torch_16", "float16: unchanged (values differ from the control "
           "with autocast off: autocast reaches only part of this op (e.g. kernels of its "
           "decomposition))", [*UNCHANGED, 'amp_dtypes = ["float16"]'],
           "[{shape = [4, 4]}, {shape = [4, 4]}, {shape = [4, 4]}]"),
    _block("exp", "exp", "torch_fp32", "float16: error", [
        'category = "banned"', "error = \"Could not run 'aten::exp' with arguments from the "
        "'AutocastCPU' backend\"", 'amp_dtypes = ["float16"]'], "[{shape = [4]}]"),
]) + "\n"


def _review(tmp_path, *args: str) -> tuple[int, str, str]:
    import contextlib
    import io
    path = tmp_path / "dev.toml"
    if not path.exists():
        path.write_text(REVIEWED, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = cli(["review", str(path), *args])
    return status, out.getvalue(), err.getvalue()


def test_the_listing_groups_departures_with_both_sides_per_dtype(tmp_path):
    status, out, _ = _review(tmp_path)
    assert status == 0
    assert "review " in out and "4 departures of cpu from cuda, in 3 groups" in out
    group = out[out.index("[lower/unchanged-no-kernel]  2 entries"):]
    assert group.splitlines()[1:6] == [
        "  float16   cuda expects  lower: outputs in float16 [torch_16]",
        "            cpu does      unchanged: as without autocast; entered no AutocastCPU kernel",
        "  bfloat16  cuda expects  lower: outputs in bfloat16 [torch_16]",
        "            cpu does      unchanged: as without autocast; entered no AutocastCPU kernel",
        "  entries: mm, bmm"]
    assert ("reproduce mm: python -m amp_conformance run -- --backend-module devbackend "
            f"--device cpu --oplist={tmp_path / 'dev.toml'} -q -k 'cpu-float16-torch_16-mm]'"
            ) in group
    assert "[lower/unchanged-values-differ]  1 entry" in out
    assert "[fp32/missing-kernel]  1 entry" in out
    assert "a failure if accepted (no kernel for the call under autocast)" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("review: 4 entries of ") and "left to decide, in 3 groups: " \
        "lower/unchanged-no-kernel (2), fp32/missing-kernel (1), " \
        "lower/unchanged-values-differ (1); a failure if accepted: 2" in last


def test_a_group_is_decided_by_its_key_which_stays_while_it_shrinks(tmp_path):
    status, out, _ = _review(tmp_path, "--keep", "bmm", "--xfail-file", str(tmp_path / "x.txt"))
    assert status == 0 and "kept 1, 3 left to review" in out
    assert "lower/unchanged-no-kernel (1)" in out  # the same key, one entry left
    status, out, _ = _review(tmp_path, "--accept", "lower/unchanged-no-kernel")
    assert status == 0 and "review: accepted 1, kept 0, 2 left to review" in out
    entries = {e.id: e for e in oplist.parse_file(tmp_path / "dev.toml").entries}
    assert entries["mm"].category == "torch_expect_builtin_promote"
    assert entries["bmm"].category == "torch_16"  # kept: the reference stays
    status, _, err = _review(tmp_path, "--accept", "lower/no-such-group")
    assert status == 2 and "no group left to review is 'lower/no-such-group'; groups: " in err


def test_keeping_writes_the_expected_failures_a_run_reads(tmp_path):
    from amp_conformance.plugin import vendor

    xfails = tmp_path / "x.txt"
    assert _review(tmp_path, "--keep", "lower/unchanged-no-kernel", "--xfail-file",
                   str(xfails))[0] == 0
    assert [e.pattern for e in vendor.read_xfail_file(xfails)] == [
        "test_policy[cpu-float16-torch_16-mm]", "test_policy[cpu-bfloat16-torch_16-mm]",
        "test_policy[cpu-float16-torch_16-bmm]", "test_policy[cpu-bfloat16-torch_16-bmm]"]
    reasons = {e.reason for e in vendor.read_xfail_file(xfails)}
    assert reasons == {"cuda's expectation kept in review; cpu: unchanged: as without "
                       "autocast; entered no AutocastCPU kernel"}
    status, out, _ = _review(tmp_path, "--keep", "exp", "--xfail-file", str(xfails))
    assert status == 0 and "1 expected failures of the kept entries added" in out
    assert len(vendor.read_xfail_file(xfails)) == 5  # appended, nothing listed twice
    status, out, _ = _review(tmp_path, "--keep", "addmm")  # without a file: printed
    assert "  test_policy[cpu-float16-torch_16-addmm]  # cuda's expectation kept" in out


def test_accepting_a_failure_is_refused_unless_asked_and_then_recorded(tmp_path):
    status, _, err = _review(tmp_path, "--accept", "*")
    assert status == 2
    assert ("refused to accept 2 entries whose observed behaviour is a failure: addmm "
            "(float16: values depart from the control with autocast off); exp (float16: no "
            "kernel for the call under autocast)") in err
    assert "--keep" in err and "--accept-failures" in err
    assert (tmp_path / "dev.toml").read_text() == REVIEWED  # nothing decided
    status, out, _ = _review(tmp_path, "--accept", "*", "--accept-failures")
    assert status == 0 and "review: accepted 4 (2 as failures), kept 0, 0 left" in out
    text = (tmp_path / "dev.toml").read_text()
    assert ("# reviewed exp: accepted what the device does, a failure (float16: no kernel for "
            "the call under autocast; --accept-failures)") in text
    assert "# reviewed mm: accepted what the device does (dev departs" in text
    entries = {e.id: e for e in oplist.parse_file(tmp_path / "dev.toml").entries}
    assert entries["exp"].note.endswith("accepted in review as a failure: float16: no kernel "
                                        "for the call under autocast")


def test_the_flags_of_a_decision_alone_are_a_usage_error(tmp_path):
    status, _, err = _review(tmp_path, "--accept-failures")
    assert status == 2 and "go with a decision: --keep KEY|ID or --accept KEY|ID" in err


def test_each_dtype_is_its_own_side_and_alike_groups_are_told_apart_by_dtype():
    from amp_conformance.tools import review, review_groups

    text = REVIEWED + "\n".join([
        _block("mv", "mv", "torch_16", f"float16: {NO_KERNEL}; bfloat16: lower", UNCHANGED),
        _block("addr", "addr", "torch_16", f"float16: {NO_KERNEL}", UNCHANGED)])
    keys = {g.key: g.ids for g in review_groups.group(review.blocks(text.splitlines()))}
    assert keys == {"lower/unchanged-no-kernel@float16,bfloat16": ["mm", "bmm"],
                    "lower/unchanged-no-kernel@float16": ["addr"],
                    "lower/float16=unchanged-no-kernel,bfloat16=lower": ["mv"],
                    "fp32/missing-kernel": ["exp"], "lower/unchanged-values-differ": ["addmm"]}


def test_a_review_item_keeps_what_was_observed_outside_autocast():
    """Under review is the policy; the call outside autocast was observed, and the active
    entry says what was seen there (a backend whose native_layer_norm gives its mean and
    rstd in the input's dtype kept CUDA's float32 and failed test_outside twice)."""
    from amp_conformance.tools.discover.observe import Observation, Row
    from amp_conformance.tools.discover.write import review_item

    (entry,) = [e for e in oplist.load("cuda").entries if e.id == "native_layer_norm"]
    row = Row(entry, "fp32", {"float16": Observation("lower", ("float16",) * 3,
                                                     outside=("float16",) * 3)})
    observed = [{"id": entry.id, "op": entry.op, "expect_outside": ["amp", "amp", "amp"]}]
    lines = review_item(row, "pu1", "cuda", ["float16"], observed)
    active = lines[lines.index("[[entry]]") + 1:lines.index("# [[entry]]  (observed)")]
    assert 'expect_outside = ["amp", "amp", "amp"]' in active, active
    assert 'category = "torch_fp32"' in active  # the policy stays the reference's
