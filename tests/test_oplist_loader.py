"""The op-list loader: every shipped list loads; malformed entries name file, id and field;
a derived list (``derive_from``) inherits its base's entries, relabelled, minus its drops."""

import textwrap

import pytest
import torch

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
        (GOOD + 'skip = [{amp_dtype = "float16", check = "all"}]\n', "mm", "skip[0].reason", "reason"),
        (GOOD + 'skip = [{weather = "rain", reason = "r"}]\n', "mm", "skip[0].weather",
         "unknown skip key"),
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


# -- every bad input is rejected, naming file, entry, field and what is allowed ---------

REJECTED = [
    # (entry fields appended to GOOD, field named, words of the message)
    ("amp_dtypes = []", "amp_dtypes", "non-empty array of 'float16' / 'bfloat16'"),
    ('amp_dtypes = ["float16", "float32"]', "amp_dtypes[1]", "allowed: float16, bfloat16"),
    ('skip = [{check = "polciy", reason = "r"}]', "skip[0].check",
     "unknown check 'polciy'; allowed: \"all\", or one or an array of the checks that call "
     "each entry backward, compiled_policy, legacy, numerics, outside, policy, transforms"),
    ('skip = [{check = ["outside", "legasy"], reason = "r"}]', "skip[0].check",
     "unknown check 'legasy'"),
    ('skip = [{check = [], reason = "r"}]', "skip[0].check", "names no check"),
    ('skip = [{fake = true, reason = "r"}]', "skip[0].check",
     'missing (required): name the check(s) this skip switches off: check = "<check>"'),
    ('skip = [{check = "all", reason = "r"}]', "skip[0]", "would switch the entry off everywhere"),
    ('skip = [{check = "all", amp_dtype = "float99", reason = "r"}]', "skip[0].amp_dtype",
     "unknown value 'float99'; allowed: float16, bfloat16"),
    ('skip = [{check = "all", numerics = "loose", reason = "r"}]', "skip[0].numerics",
     "unknown value 'loose'; allowed: bitwise, close"),
    ('skip = [{check = "all", fake = "yes", reason = "r"}]', "skip[0].fake", "expected true or false"),
    ('skip = [{check = "all", hip = 1, reason = "r"}]', "skip[0].hip", "expected true or false"),
    ('skip = ["numerics"]', "skip[0]", "expected a table"),
    ('since = "2.6"\nuntil = "2.6"', "until", "until '2.6' must be later than since '2.6'"),
    ('since = "2.10"\nuntil = "2.9"', "until", "must be later than since '2.10'"),
    ("tolerance = {rtol = inf, atol = 0.0}", "tolerance.rtol", "expected a finite number >= 0, got inf"),
    ("tolerance = {rtol = 0.0, atol = nan}", "tolerance.atol", "finite number >= 0, got nan"),
    ("tolerance = {rtol = -1e-3, atol = 0.0}", "tolerance.rtol", ">= 0, got -0.001"),
    ("tolerance = {rtol = true, atol = 0.0}", "tolerance.rtol", "finite number"),
    ("tolerance = {rtol = 0.1}", "tolerance", "expected {rtol = <number>, atol = <number>}"),
]


@pytest.mark.parametrize("extra, field, words", REJECTED, ids=[r[1] + "-" + r[0][:24] for r in REJECTED])
def test_bad_input_is_rejected_naming_the_field(tmp_path, extra, field, words):
    path = write(tmp_path, GOOD + extra + "\n")
    with pytest.raises(OpListError) as info:
        oplist.read_file(path)
    line = str(info.value)
    assert line.startswith(f"{path}: entry 'mm': field {field!r}: "), line
    assert words in line, line
    assert (info.value.path, info.value.entry, info.value.field) == (str(path), "mm", field)
    assert len(info.value.errors) == 1


def test_a_tensor_too_large_is_rejected_and_the_bound_is_configurable(tmp_path, monkeypatch):
    body = GOOD.replace("{shape = [2, 2]},", "{tuple = [{shape = [2048, 1024]}]},")
    path = write(tmp_path, body)
    with pytest.raises(OpListError) as info:
        oplist.read_file(path)
    assert info.value.field == "args[0].tuple[0].shape"
    assert "2097152 elements is more than the 1048576 allowed per tensor (raise it with " \
           "AMP_CONFORMANCE_MAX_ELEMENTS)" in str(info.value)
    monkeypatch.setenv("AMP_CONFORMANCE_MAX_ELEMENTS", str(2**21))
    oplist.read_file(path)
    monkeypatch.setenv("AMP_CONFORMANCE_MAX_ELEMENTS", "3")
    with pytest.raises(OpListError, match=r"field 'args\[0\]\.tuple\[0\]\.shape': .* the 3 allowed"):
        oplist.read_file(path)
    monkeypatch.setenv("AMP_CONFORMANCE_MAX_ELEMENTS", "lots")
    with pytest.raises(OpListError) as info:
        oplist.read_file(path)
    assert str(info.value) == (f"{path}: environment variable AMP_CONFORMANCE_MAX_ELEMENTS must be "
                               "a positive integer, got 'lots'")


def test_a_file_that_cannot_be_read_names_the_file(tmp_path):
    folder = tmp_path / "lists.toml"
    folder.mkdir()
    with pytest.raises(OpListError, match=f"^{folder}: is a directory, not an op-list file$"):
        oplist.read_file(folder)
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes((HEADER + GOOD + 'note = "caf\xe9"\n').encode("latin-1"))
    with pytest.raises(OpListError) as info:
        oplist.read_file(latin1)
    assert str(info.value).startswith(f"{latin1}: not UTF-8 text (")
    assert info.value.path == str(latin1) and info.value.entry is None


def test_every_problem_of_a_file_comes_in_one_error(tmp_path):
    body = "\n".join([
        GOOD + "amp_dtypes = []",
        GOOD.replace('"mm"', '"mm2"', 1) + 'tolerance = {rtol = inf, atol = 0.0}\nflavour = 1',
        GOOD.replace('"mm"', '"mm3"', 1) + 'skip = [{check = "polciy", reason = "r"}]',
        '[[exclude]]\noverload = "aten::mm"\nreason = "r"\nsince = "2.9"\nuntil = "2.8"',
    ])
    path = write(tmp_path, body + "\n")
    with pytest.raises(OpListError) as info:
        oplist.read_file(path)
    where = [(p.entry, p.field) for p in info.value.errors]
    assert where == [("mm", "amp_dtypes"), ("mm2", "flavour"), ("mm2", "tolerance.rtol"),
                     ("mm3", "skip[0].check"), ("aten::mm", "until")]
    lines = str(info.value).splitlines()
    assert lines[0] == f"{path}: 5 problems:"
    assert all(line.startswith(f"  {path}: ") for line in lines[1:]), lines
    assert (info.value.entry, info.value.field) == ("mm", "amp_dtypes")


def test_merge_problems_come_together(tmp_path):
    body = GOOD + "\n" + GOOD.replace('"mm"', '"nobody"', 1) + "override = true\n"
    path = write(tmp_path, body)
    with pytest.raises(OpListError) as info:
        oplist.load("cpu", [path])
    assert [(p.entry, p.field) for p in info.value.errors] == [("mm", "id"), ("nobody", "override")]


def test_override_is_an_entry_field(tmp_path):
    path = write(tmp_path, GOOD + "override = true\n")
    (entry,) = oplist.read_file(path)[1]
    assert entry.override is True
    assert not any(e.override for e in oplist.load("cpu").entries)


def test_a_skip_concerns_the_checks_it_names_only(tmp_path):
    import torch

    skips = [
        '{fake = true, check = "outside", reason = "outside only"}',
        '{amp_dtype = "float16", check = ["policy", "legacy"], reason = "two"}',
        '{numerics = "close", check = "all", reason = "every check"}',
    ]
    path = write(tmp_path, GOOD + f"skip = [{', '.join(skips)}]\n")
    one, two, every = oplist.read_file(path)[1][0].skips
    assert one.checks == ("outside",) and two.checks == ("policy", "legacy") and every.checks is None
    bf16, fp16 = torch.bfloat16, torch.float16
    assert one.applies(bf16, "bitwise", True, "outside")
    assert not one.applies(bf16, "bitwise", True, "policy")
    assert not one.applies(bf16, "bitwise", False, "outside")
    assert two.applies(fp16, "bitwise", False, "legacy")
    assert not two.applies(fp16, "bitwise", False, "numerics")
    assert every.applies(bf16, "close", False, "numerics") and every.applies(bf16, "close", False, None)
    assert not one.applies(bf16, "bitwise", True, None)


def test_every_shipped_skip_names_its_check():
    for device in oplist.builtin_devices():
        for entry in oplist.load(device).entries:
            for skip in entry.skips:
                assert skip.checks is None or skip.checks, (device, entry.id)


def test_a_malformed_extra_list_fails_the_run_listing_every_problem(pytester, tmp_path):
    body = GOOD.replace('"mm"', '"vendor-mm"', 1) + "amp_dtypes = []\n" + \
        'skip = [{check = "polciy", reason = "r"}]\n'
    path = write(tmp_path, body)
    result = pytester.runpytest("--pyargs", "amp_conformance.suite.test_oplist", "--oplist", str(path))
    assert result.ret == 4
    err = result.stderr.str()
    assert f"amp-conformance: bad op list: {path}: 2 problems:\n" in err, err
    assert f"\n  {path}: entry 'vendor-mm': field 'amp_dtypes': expected a non-empty array" in err
    assert f"\n  {path}: entry 'vendor-mm': field 'skip[0].check': unknown check 'polciy'" in err


def test_a_builtin_promote_entry_with_one_dtype_per_output_is_checked_outside(tmp_path):
    """`expect` as an array on a builtin-promote entry: outside autocast the same per-output
    dtypes are expected (once a KeyError of the suite, met on PyTorch/XLA's list)."""
    from amp_conformance.checks.case import Case
    from amp_conformance.checks.outside.check import check_outside
    from amp_conformance.core.target import Target

    path = write(tmp_path, """
        [[entry]]
        id = "two-outputs"
        op = "max"
        category = "torch_expect_builtin_promote"
        args = [{shape = [4, 3]}, 1]
        expect = ["float32", "int64"]
        method = false
        """)
    entry = next(e for e in oplist.load("cpu", [str(path)]).entries if e.id == "two-outputs")
    check_outside(Case(Target("cpu"), torch.bfloat16, entry))
    wrong = write(tmp_path, GOOD.replace('"mm"', '"other"', 1) + """
        [[entry]]
        id = "two-outputs-wrong"
        op = "max"
        category = "torch_expect_builtin_promote"
        args = [{shape = [4, 3]}, 1]
        expect = ["float32", "float32"]
        method = false
        """, name="wrong.toml")
    entry = next(e for e in oplist.load("cpu", [str(wrong)]).entries if e.id == "two-outputs-wrong")
    with pytest.raises(AssertionError, match="int64"):
        check_outside(Case(Target("cpu"), torch.bfloat16, entry))


# -- derived lists ([list] derive_from, drop) -------------------------------------------


@pytest.mark.parametrize(
    "meta, words, field",
    [
        ('derive_from = "cpu"\n', "derive_from", "list.derive_from"),
        ('drop = [{id = "mm", reason = "r"}]\n', "only applies to a list with derive_from", "list.drop"),
        ('derive_from = "cuda"\ndrop = [{id = "mm"}]\n', "written reason", "list.drop[0].reason"),
        ('derive_from = "cuda"\ndrop = [{id = "mm", overload = "aten::mm", reason = "r"}]\n',
         "exactly one", "list.drop[0]"),
    ],
)
def test_malformed_derivation(tmp_path, meta, words, field):
    path = tmp_path / "derived.toml"
    path.write_text(f'[list]\ndevice = "cpu"\n{meta}')
    with pytest.raises(OpListError) as info:
        oplist.parse_file(path)
    assert words in str(info.value) and info.value.field == field, str(info.value)


def test_drop_of_an_unknown_id_and_a_derivation_cycle(tmp_path):
    path = tmp_path / "xpu_extra.toml"
    path.write_text('[list]\ndevice = "xpu"\nderive_from = "cuda"\n'
                    '[[list.drop]]\nid = "no-such-entry"\nreason = "r"\n')
    with pytest.raises(OpListError, match="'no-such-entry' is no entry of the cuda list"):
        oplist.load("xpu", [path])
    cycle = tmp_path / "cuda_from_xpu.toml"
    cycle.write_text('[list]\ndevice = "cuda"\nderive_from = "xpu"\n')
    with pytest.raises(OpListError, match="circular derivation"):
        oplist.load("cuda", [cycle])


def test_derived_list_inherits_relabelled_entries_minus_drops():
    xpu = oplist.load("xpu")
    ids = {e.id for e in xpu.entries}
    assert xpu.derived_from == "cuda"
    assert "mm" in ids and "cudnn_convolution" not in ids and "lstm" in ids
    assert all(e.device == "xpu" for e in xpu.entries)
    assert {d.id for d in xpu.drops} >= {"cudnn_convolution", "cudnn_convolution_transpose"}
    assert all(d.reason for d in xpu.drops)
