"""The coverage family (checks/coverage) and its command (``python -m amp_conformance
coverage``, tools/coverage.py): every overload of a device's autocast policy is reached by
an op-list entry whose check runs, or excluded for a written reason; the observer that
records the kernels entered leaves nothing behind; ``[[exclude]]`` tables are validated.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

import pytest
import torch

from amp_conformance.__main__ import main
from amp_conformance.checks.coverage import check as coverage
from amp_conformance.core.dispatch import OBSERVER_KEY, release_shared, shared_observer
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpListError

HEADER = '[list]\ndevice = "cpu"\n\n'


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_coverage_command_reports_nothing_missing(device, capsys):
    rc = main(["coverage", "--device", device, "-q"])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    match = re.fullmatch(rf"coverage {device}: (\d+)/(\d+) covered, 0 reached but not checked, "
                         rf"(\d+) excluded, 0 missing", last)
    assert match, out[-3000:]
    covered, total, excluded = map(int, match.groups())
    assert covered + excluded == total and total > 0
    assert rc == 0


def test_coverage_names_an_overload_no_entry_reaches():
    lists = oplist.load("cpu")
    without = dataclasses.replace(lists, entries=tuple(
        e for e in lists.entries if e.id not in ("fft_rfft2", "max_pool3d")))
    with pytest.raises(ConformanceFailure) as info:
        coverage.check("cpu", without, Target("cpu"), [torch.bfloat16])
    message = str(info.value)
    assert "aten::fft_rfft2" in message and "aten::max_pool3d" in message, message
    assert "2 missing" in message


def test_coverage_exit_status_and_listing(tmp_path, capsys):
    """A CompositeImplicit op is credited with the kernel it really enters, and an entry
    that claims a cast for an op without an autocast kernel is listed."""
    path = tmp_path / "extra.toml"
    path.write_text(textwrap.dedent("""
        [list]
        device = "cpu"

        [[entry]]
        id = "no-kernel-relu"
        op = "relu"
        category = "torch_16"
        args = [{shape = [4]}]
    """))
    rc = main(["coverage", "--device", "cpu", "--oplist", str(path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "entry no-kernel-relu (torch_16, torch.relu): enters no AutocastCPU kernel" in out
    assert re.search(r"aten::matmul  <- matmul\n", out), out  # not credited to aten::mm
    assert main(["coverage", "--device", "not-a-device"]) == 2


def test_an_overload_reached_only_where_nothing_checks_it_is_reported_and_fails(tmp_path, capsys):
    """Reaching a kernel is not checking it: an entry whose policy check is skipped in this
    mode, or whose call raises, covers nothing."""
    path = tmp_path / "unchecked.toml"
    path.write_text(textwrap.dedent("""
        [list]
        device = "cpu"

        [[entry]]
        id = "max_pool3d"
        override = true
        op = "max_pool3d"
        category = "torch_fp32"
        args = [{shape = [1, 2, 4, 4, 4], dtype = "amp"}, [2, 2, 2]]
        skip = [{check = "policy", amp_dtype = "bfloat16", reason = "a skip of this run"},
                {check = "policy", amp_dtype = "float16", reason = "a skip of this run"}]

        [[entry]]
        id = "fft_rfft2"
        override = true
        op = "fft_rfft2"
        category = "fft_fp32"
        args = [{shape = [4], dtype = "amp"}]
    """))
    rc = main(["coverage", "--device", "cpu", "--oplist", str(path), "-q"])
    out = capsys.readouterr().out
    assert rc == 1, out[-3000:]
    # on a CPU without the oneDNN LSTM primitive (AVX2 only) mkldnn_rnn_layer is excluded
    # by its hardware probe instead of covered: covered + excluded is the same everywhere
    # the policy's size is the running torch's (127 overloads in 2.13, 129 in 2.11)
    last = out.strip().splitlines()[-1]
    total = len(coverage.policy_overloads("cpu"))
    counts = re.fullmatch(rf"coverage cpu: (\d+)/{total} covered, 2 reached but not checked, "
                          r"(\d+) excluded, 0 missing", last)
    assert counts and int(counts[1]) + int(counts[2]) == total - 2, last
    section = out[out.index("reached but not checked (2):"):out.index("excluded (")]
    assert "aten::max_pool3d  <- max_pool3d (policy check skipped: a skip of this run)" in section
    assert "aten::fft_rfft2  <- fft_rfft2 (raised: " in section and "IndexError" in section
    with pytest.raises(ConformanceFailure) as info:
        coverage.check("cpu", oplist.load("cpu", [path]), Target("cpu"), [torch.bfloat16])
    message = str(info.value)
    assert "reached but not checked" in message
    assert "aten::max_pool3d" in message and "aten::fft_rfft2" in message, message


def test_exclusions_bound_to_fake_mode_or_a_missing_feature(tmp_path, monkeypatch):
    """`fake = true` holds only with --fake; `requires` only where the machine lacks it."""
    from amp_conformance.core import hardware

    path = tmp_path / "ex.toml"
    path.write_text(HEADER + '[[exclude]]\noverload = "aten::max_pool3d"\nreason = "r"\n'
                    'fake = true\n\n[[exclude]]\noverload = "aten::fft_rfft2"\nreason = "r"\n'
                    'requires = "onednn_lstm"\n')
    lists = oplist.load("cpu", [path])
    fake_only, hardware_bound = (x for x in lists.exclusions if x.reason == "r")
    assert fake_only.applies(True) and not fake_only.applies(False)
    monkeypatch.setitem(hardware.PROBES, "onednn_lstm", lambda dtype: None)
    assert not hardware_bound.applies(False, [torch.bfloat16])
    monkeypatch.setitem(hardware.PROBES, "onednn_lstm", lambda dtype: "absent here")
    assert hardware_bound.applies(False, [torch.bfloat16, torch.float16])
    bad = tmp_path / "bad.toml"
    bad.write_text(HEADER + '[[exclude]]\noverload = "aten::mm"\nreason = "r"\nfake = 1\n'
                   'requires = "avx9"\n')
    with pytest.raises(OpListError) as info:
        oplist.parse_file(bad)
    assert "'fake'" in str(info.value) and "'requires'" in str(info.value), str(info.value)


def test_observer_records_entered_kernels_and_leaves_nothing_behind():
    include_before = str(torch._C._dispatch_tls_local_include_set())
    a = torch.ones(4, 4)
    with coverage.Observer("cpu", coverage.policy_overloads("cpu")) as observer:
        with observer.recording() as seen, torch.autocast("cpu", dtype=torch.bfloat16):
            torch.matmul(a, a)
            torch.nn.functional.cross_entropy(a, torch.zeros(4, dtype=torch.long))
        with observer.recording() as outside:
            torch.mm(a, a)  # autocast off: no autocast kernel entered
    assert seen == ["aten::matmul", "aten::cross_entropy_loss"]
    assert outside == []
    assert str(torch._C._dispatch_tls_local_include_set()) == include_before
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(a, a).dtype == torch.bfloat16


def test_coverage_runs_twice_beside_a_live_observer(monkeypatch, capsys):
    """Coverage twice in one process while the shared observer that discover and the
    kernel-entry check leave until the session ends is live, on a torch that refuses a
    second Python kernel for an op and key (2.11 does; 2.13 lets it hide the first, so the
    refusal is forced here): every observer shares one kernel per overload, each still
    records, and nothing is left registered once the last one exits."""
    impl = torch.library.Library.impl
    if "allow_override" in inspect.signature(impl).parameters:
        def refusing(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=True):
            return impl(self, op_name, fn, dispatch_key, with_keyset=with_keyset,
                        allow_override=False)
        monkeypatch.setattr(torch.library.Library, "impl", refusing)
    a = torch.ones(4, 4)
    release_shared()
    try:
        shared = shared_observer("cpu")
        lasts = []
        for _ in range(2):
            assert main(["coverage", "--device", "cpu", "-q"]) == 0
            lasts.append(capsys.readouterr().out.strip().splitlines()[-1])
        assert lasts[0] == lasts[1] and lasts[0].endswith(" 0 missing"), lasts
        with shared.recording() as seen, torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(a, a)
        assert seen == ["aten::mm"]
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", OBSERVER_KEY)
    finally:
        release_shared()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", OBSERVER_KEY)


@pytest.mark.parametrize("fake_device", ["xpu", "mps", "mtia"], indirect=True)
def test_derived_lists_cover_their_device_through_fake(fake_device):
    device = fake_device
    report = coverage.compute(device, oplist.load(device), Target(device, fake=True))
    assert report.policy and not report.missing, report.missing
    assert not report.unchecked, report.unchecked
    assert not report.outside_policy, [r.entry.id for r in report.outside_policy]
    assert report.lists.derived_from in ("cuda", "xpu")



# -- [[exclude]] -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, name, field, words",
    [
        ('[[exclude]]\noverload = "aten::mm"\n', "aten::mm", "reason", "written reason"),
        ('[[exclude]]\noverload = "aten::mm"\nreason = "  "\n', "aten::mm", "reason", "written reason"),
        ('[[exclude]]\noverload = "mm"\nreason = "r"\n', "#0", "overload", "like 'aten::norm.Scalar'"),
        ('[[exclude]]\nreason = "r"\n', "#0", "overload", "operator overload"),
        ('[[exclude]]\noverload = "aten::no_such_op"\nreason = "r"\n', "aten::no_such_op", "overload",
         "unknown overload"),
        ('[[exclude]]\noverload = "aten::mm"\nreason = "r"\ncolour = 1\n', "aten::mm", "colour",
         "unknown field"),
        ('[[exclude]]\noverload = "aten::mm"\nreason = "r"\nsince = "two"\n', "aten::mm", "since",
         "version"),
        ('[[exclude]]\noverload = "aten::mm"\nreason = "r"\n\n[[exclude]]\noverload = "aten::mm"\n'
         'reason = "again"\n', "aten::mm", "overload", "duplicate exclusion"),
    ],
)
def test_malformed_exclude_names_file_overload_and_field(tmp_path, body, name, field, words):
    path = tmp_path / "bad.toml"
    path.write_text(HEADER + body)
    with pytest.raises(OpListError) as info:
        oplist.parse_file(path)
    message = str(info.value)
    assert str(path) in message and f"exclude {name!r}" in message and repr(field) in message, message
    assert words in message, message
    assert (info.value.kind, info.value.entry, info.value.field) == ("exclude", name, field)


def test_exclusion_outside_its_versions_is_not_checked_and_not_counted(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text(HEADER + '[[exclude]]\noverload = "aten::gone_op"\nreason = "r"\nuntil = "2.0"\n')
    lists = oplist.load("cpu", [path])
    (exclusion,) = [x for x in lists.exclusions if x.overload == "aten::gone_op"]
    assert exclusion.version_gap().startswith("not applicable")
    report = coverage.compute("cpu", lists, Target("cpu"), [torch.bfloat16])
    assert "aten::gone_op" not in report.excluded and not report.stale_exclusions


def test_exclusion_is_counted_and_a_stale_one_listed(tmp_path, capsys):
    path = tmp_path / "ex.toml"
    path.write_text(HEADER + '[[exclude]]\noverload = "aten::relu"\nreason = "not in the policy"\n')
    rc = main(["coverage", "--device", "cpu", "--oplist", str(path), "-q"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "exclude aten::relu: not in the AutocastCPU policy" in out


def test_each_note_says_whether_it_asks_for_action(tmp_path, capsys):
    """PyTorch's recorded defect and what is for other runs are information; a needless
    [[exclude]] and an entry that raises for no recorded reason ask the list's owner to act."""
    assert main(["coverage", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    notes = out[out.index("notes ("):].splitlines()
    assert re.fullmatch(r"notes \((\d+): 0 to act on, \1 for information\):", notes[0])
    defect = [n for n in notes if "entry cat-mixed-lower-precision raised while observed" in n]
    assert defect and defect[0].startswith("  info ")
    assert "PyTorch's own defect prioritize-mixed-lower-precision" in defect[0]
    path = tmp_path / "acts.toml"
    path.write_text(HEADER + textwrap.dedent("""\
        [[entry]]
        id = "mm-odd"
        op = "mm"
        category = "torch_16"
        args = [{shape = [8, 8], dtype = "amp"}, {shape = [3, 3], dtype = "amp"}]

        [[exclude]]
        overload = "aten::mm"
        reason = "said to be unreachable"
        """))
    main(["coverage", "--device", "cpu", "--oplist", str(path)])
    out = capsys.readouterr().out
    assert "to act on" in out and "  ACT  entry mm-odd raised while observed" in out
    assert "the entry's items in the suite's run say which" in out
