"""The entry field table is the one source of the schema: loader, docs and discover follow it."""

import dataclasses
from pathlib import Path

from amp_conformance.schema import argspec, fields, oplist
from amp_conformance.tools.discover.observe import Observation, Row
from amp_conformance.tools.discover.write import entry_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "oplists.md"
#: Entry attributes no TOML key sets: the loader derives them
DERIVED = {"policy", "path", "device"}


def test_docs_field_reference_is_generated_from_the_table():
    section = fields.section(DOC.read_text(encoding="utf-8"))
    assert section is not None, f"{DOC} lost its generated markers ({fields.BEGIN})"
    assert section == fields.markdown(), (
        f"{DOC}'s field reference differs from amp_conformance/schema/fields.py; regenerate it "
        "with: python -m amp_conformance.schema.fields --write docs/oplists.md")


def test_docs_state_the_element_bound_and_its_override():
    text = DOC.read_text(encoding="utf-8")
    assert f"({argspec.MAX_ELEMENTS})" in text and argspec.MAX_ELEMENTS_ENV in text


def test_every_row_is_an_entry_attribute_and_every_attribute_a_row():
    """Adding a field is one row plus the Entry attribute: forgetting either fails here."""
    attributes = {f.name for f in dataclasses.fields(oplist.Entry)}
    rows = {f.attribute for f in fields.ENTRY_FIELDS}
    assert rows <= attributes, rows - attributes
    assert attributes - rows == DERIVED


def test_keys_derive_from_the_table():
    assert fields.ENTRY_KEYS == tuple(f.key for f in fields.ENTRY_FIELDS)
    assert oplist.ENTRY_KEYS == set(fields.ENTRY_KEYS)
    assert len(set(fields.ENTRY_KEYS)) == len(fields.ENTRY_KEYS)
    assert set(oplist.SKIP_CONDITIONS) == {"amp_dtype", "numerics", "fake", "hip", "requires",
                                           "since", "until"}


def test_every_row_is_documented():
    for row in (*fields.ENTRY_FIELDS, *fields.SKIP_FIELDS):
        assert row.type and row.doc.endswith(".") and "|" not in row.doc, row.key
        assert row.default_text(), row.key


def test_defaults_come_from_the_table(tmp_path):
    path = tmp_path / "l.toml"
    path.write_text('[list]\ndevice = "cpu"\n[[entry]]\nid = "x"\nop = "mm"\n'
                    'category = "torch_16"\nargs = [{shape = [2, 2]}, {shape = [2, 2]}]\n')
    (entry,) = oplist.read_file(path)[1]
    assert (entry.namespace, entry.expect, entry.cast) == ("torch", "amp", "amp")  # the category's
    assert (entry.expect_outside, entry.note, entry.override, entry.skips) == ("inputs", "", False, ())
    assert entry.kwargs == {} and entry.method is None and entry.amp_dtypes is None


def test_markdown_command_prints_the_reference(capsys):
    assert fields.main(["--markdown"]) == 0
    assert capsys.readouterr().out == fields.markdown()


def test_discover_writes_keys_in_the_table_order(tmp_path):
    path = tmp_path / "ref.toml"
    path.write_text(
        '[list]\ndevice = "cpu"\n[[entry]]\nnote = "n"\nuntil = "99.0"\n'
        'skip = [{check = "numerics", numerics = "close", reason = "r"}]\n'
        'amp_dtypes = ["bfloat16"]\nargs = [{shape = [2, 2]}, {shape = [2, 2]}]\n'
        'tolerance = {rtol = 0.1, atol = 0.1}\nsince = "2.0"\nmethod = false\n'
        'category = "torch_16"\nop = "mm"\nid = "mm"\n')
    (entry,) = oplist.read_file(path)[1]
    seen = Observation("lower", ("bfloat16",), outside=("float32",))
    table = entry_table(Row(entry, "lower", {"bfloat16": seen}), ["bfloat16"], "cpu",
                        restrict=True)
    order = [k for k in fields.ENTRY_KEYS if k in table]
    assert list(table) == order
    assert order[:5] == ["id", "op", "category", "method", "args"]
