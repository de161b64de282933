"""The op-list loader: every shipped list loads; malformed entries name file, id and field."""

import textwrap

import pytest

from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpListError

HEADER = '[list]\ndevice = "cpu"\n\n'
GOOD = '[[entry]]\nid = "mm"\nop = "mm"\ncategory = "torch_16"\nargs = [{shape = [2, 2]}, {shape = [2, 2]}]\n'


def write(tmp_path, body, name="extra.toml", header=HEADER):
    path = tmp_path / name
    path.write_text(header + textwrap.dedent(body))
    return path


def test_shipped_lists_load():
    for device in oplist.builtin_devices():
        lists = oplist.load(device)
        assert lists.entries, f"no entries for {device}"
        assert len({e.id for e in lists.entries}) == len(lists.entries)


def test_cpu_list_ports_every_upstream_entry():
    """AutocastCPUTestLists has 55 entries; the port keeps their categories."""
    entries = [e for e in oplist.load("cpu").entries if e.path.endswith("cpu.toml")]
    counts = {}
    for e in entries:
        counts[e.category] = counts.get(e.category, 0) + 1
    assert counts == {
        "torch_expect_builtin_promote": 9, "methods_expect_builtin_promote": 9, "torch_16": 16,
        "torch_fp32": 6, "nn_16": 1, "nn_fp32": 12, "torch_need_autocast_promote": 2,
    }


@pytest.mark.parametrize(
    "body, entry, field, words",
    [
        (GOOD.replace('op = "mm"', 'op = "no_such_op"'), "mm", "op", "unknown op"),
        (GOOD.replace('category = "torch_16"', 'category = "torch_17"'), "mm", "category", "allowed"),
        (GOOD.replace("{shape = [2, 2]},", '{shape = [2, "x"]},'), "mm", "args[0].shape", "non-negative"),
        (GOOD.replace("{shape = [2, 2]},", '{shape = [2, 2], dtype = "float33"},'), "mm",
         "args[0].dtype", "unknown dtype"),
        (GOOD.replace("{shape = [2, 2]},", '{shape = [2, 2], colour = 1},'), "mm",
         "args[0].colour", "unknown tensor field"),
        (GOOD + 'flavour = "x"\n', "mm", "flavour", "unknown field"),
        (GOOD + 'expect = "float99"\n', "mm", "expect", "unknown dtype"),
        (GOOD + 'since = "two"\n', "mm", "since", "version"),
        (GOOD + 'skip = [{amp_dtype = "float16"}]\n', "mm", "skip[0].reason", "reason"),
        (GOOD + 'skip = [{weather = "rain", reason = "r"}]\n', "mm", "skip[0].weather", "condition"),
        (GOOD.replace('id = "mm"', 'id = "m m"'), "#0", "id", "id"),
        (GOOD.replace('op = "mm"\n', ""), "mm", "op", "missing"),
        (GOOD.replace('category = "torch_16"', 'category = "banned"'), "mm", "error", "error"),
    ],
)
def test_malformed_entry_names_file_entry_and_field(tmp_path, body, entry, field, words):
    path = write(tmp_path, body)
    with pytest.raises(OpListError) as info:
        oplist.read_file(path)
    message = str(info.value)
    assert str(path) in message and repr(entry) in message and repr(field) in message, message
    assert words in message, message
    assert (info.value.entry, info.value.field) == (entry, field)


def test_duplicate_id_in_one_file(tmp_path):
    path = write(tmp_path, GOOD + "\n" + GOOD)
    with pytest.raises(OpListError, match="duplicate id in this file"):
        oplist.load("cpu", [path])


def test_duplicate_of_builtin_id_needs_override(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(OpListError, match="override = true"):
        oplist.load("cpu", [path])
    write(tmp_path, GOOD + "override = true\nnote = 'vendor'\n", name="over.toml")
    merged = oplist.load("cpu", [tmp_path / "over.toml"])
    mm = [e for e in merged.entries if e.id == "mm"]
    assert len(mm) == 1 and mm[0].note == "vendor"


def test_override_of_unknown_id(tmp_path):
    path = write(tmp_path, GOOD.replace('id = "mm"', 'id = "new-mm"') + "override = true\n")
    with pytest.raises(OpListError, match="no earlier list"):
        oplist.load("cpu", [path])


def test_bad_toml_and_missing_list_table(tmp_path):
    with pytest.raises(OpListError, match="not valid TOML"):
        oplist.read_file(write(tmp_path, "[[entry]\n"))
    with pytest.raises(OpListError, match="list"):
        oplist.read_file(write(tmp_path, GOOD, header=""))
    with pytest.raises(OpListError, match="no such op-list file"):
        oplist.read_file(tmp_path / "absent.toml")


def test_version_bounds_make_entries_not_applicable():
    entry = next(e for e in oplist.load("cpu").entries if e.id == "_addmm_activation")
    assert entry.version_gap("2.5.1") == "not applicable: needs torch >= 2.6, running 2.5.1"
    assert entry.version_gap("2.13.0") is None


def test_unknown_op_outside_version_bounds_is_accepted(tmp_path):
    """An op from a future torch is only checked for existence where it applies."""
    body = GOOD.replace('op = "mm"', 'op = "future_op"').replace('id = "mm"', 'id = "f"')
    path = write(tmp_path, body + 'since = "99.0"\n')
    _, entries = oplist.read_file(path)
    assert entries[0].version_gap().startswith("not applicable")
