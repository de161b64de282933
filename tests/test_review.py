"""``python -m amp_conformance review`` (tools/review.py): the departures discover left,
listed, accepted or kept, and the list rewritten only once it loads."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amp_conformance.__main__ import main
from amp_conformance.schema import oplist
from amp_conformance.tools import review

#: two departures as discover writes them (tools/discover/write.py review_item), one entry
#: that matched the reference
LIST = textwrap.dedent('''\
    [list]
    device = "cpu"

    [[entry]]
    id = "mm"
    op = "mm"
    category = "torch_16"
    args = [{shape = [4, 4]}, {shape = [4, 4]}]

    # REVIEW relu: cpu departs from cuda (float16: lower).
    # The cuda expectation below stays active, so the departure fails until
    # reviewed; if it is intended, replace the entry with the observed one after it.
    [[entry]]
    id = "relu"
    op = "relu"
    category = "torch_expect_builtin_promote"
    args = [{shape = [4]}]
    expect = "float32"
    note = "REVIEW: cpu departs from cuda (float16: lower); cuda's expectation kept"
    # [[entry]]  (observed)
    # id = "relu"
    # op = "relu"
    # category = "torch_16"
    # args = [{shape = [4]}]
    # note = "observed lower; cuda: unchanged"

    # REVIEW softmax: cpu departs from cuda (float16: unchanged).
    # The cuda expectation below stays active, so the departure fails until
    # reviewed; if it is intended, replace the entry with the observed one after it.
    [[entry]]
    id = "softmax"
    op = "softmax"
    category = "torch_fp32"
    args = [{shape = [4]}, 0]
    note = "REVIEW: cpu departs from cuda (float16: unchanged); cuda's expectation kept"
    # [[entry]]  (observed)
    # id = "softmax-float16"
    # op = "softmax"
    # category = "torch_expect_builtin_promote"
    # args = [{shape = [4]}, 0]
    # expect = "float16"
    # amp_dtypes = ["float16"]
    # note = "observed unchanged; cuda: fp32"
''')


@pytest.fixture
def listed(tmp_path: Path) -> Path:
    path = tmp_path / "dev.toml"
    path.write_text(LIST, encoding="utf-8")
    return path


def _entries(path: Path) -> dict[str, oplist.Entry]:
    return {e.id: e for e in oplist.parse_file(path).entries}


def test_the_blocks_are_read_as_discover_writes_them():
    found = review.blocks(LIST.splitlines())
    assert [(b.id, b.what, b.reference) for b in found] == [
        ("relu", "cpu departs from cuda (float16: lower)", "cuda"),
        ("softmax", "cpu departs from cuda (float16: unchanged)", "cuda")]
    assert found[0].active[0] == "[[entry]]" and found[0].observed[0][:2] == (
        "[[entry]]", 'id = "relu"')


def test_listing_changes_nothing(listed, capsys):
    assert main(["review", str(listed)]) == 0
    out = capsys.readouterr().out
    assert "[builtin_promote/lower]  1 entry" in out and "entries: relu" in out
    assert "review: 2 entries of" in out and listed.read_text() == LIST


def test_accept_takes_the_observed_entry_and_keep_the_reference(listed, capsys):
    assert main(["review", str(listed), "--accept", "*", "--keep", "softmax"]) == 0
    assert "review: accepted 1, kept 1, 0 left to review" in capsys.readouterr().out
    entries = _entries(listed)
    assert entries["relu"].category == "torch_16" and entries["mm"].category == "torch_16"
    assert entries["softmax"].category == "torch_fp32"
    assert entries["softmax"].note.startswith("reviewed: cpu departs from cuda")
    text = listed.read_text()
    assert "# reviewed relu: accepted what the device does (cpu departs from cuda (float16: " \
           'lower)); cuda expects: category = "torch_expect_builtin_promote"; expect = "float32"' in text
    assert "# observed, not taken:\n# [[entry]]\n# id = \"softmax-float16\"" in text
    assert "REVIEW" not in text
    assert main(["review", str(listed)]) == 0
    assert "review: nothing left to decide" in capsys.readouterr().out


def test_an_observed_entry_split_by_dtype_is_taken_as_it_was_seen(listed):
    assert main(["review", str(listed), "--accept", "soft*", "--out",
                 str(listed.with_name("out.toml"))]) == 0
    entries = _entries(listed.with_name("out.toml"))
    assert "softmax" not in entries and entries["softmax-float16"].amp_dtypes == ("float16",)
    assert entries["relu"].note.startswith("REVIEW:")  # not decided: still to review
    assert listed.read_text() == LIST  # --out leaves the list as it was


@pytest.mark.parametrize("args, message", [
    (["--accept", "conv*"], "no entry left to review matches 'conv*'; to review: relu, softmax"),
    (["--keep", "mm"], "no entry left to review matches 'mm'"),
])
def test_a_pattern_that_matches_nothing_is_a_usage_error(listed, capsys, args, message):
    assert main(["review", str(listed), *args]) == 2
    assert message in capsys.readouterr().err and listed.read_text() == LIST


def test_a_list_that_would_not_load_is_left_unchanged(listed, capsys):
    broken = LIST.replace('# category = "torch_16"', '# category = "no_such_category"')
    listed.write_text(broken, encoding="utf-8")
    assert main(["review", str(listed), "--accept", "relu"]) == 2
    err = capsys.readouterr().err
    assert "the reviewed list would not load" in err and "unchanged" in err
    assert "no_such_category" in err and listed.read_text() == broken


def test_a_block_without_an_observed_entry_cannot_be_accepted(listed, capsys):
    lines = [line for line in LIST.splitlines()
             if not line.startswith("# ") or line.startswith("# REVIEW")]
    listed.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["review", str(listed), "--accept", "relu"]) == 2
    assert "has no observed entry to accept" in capsys.readouterr().err
