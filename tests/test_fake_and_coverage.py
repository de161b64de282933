"""--fake catches broken device policies without the device; coverage sees the whole policy.

Broken autocast implementations are emulated by overriding an ``Autocast<Device>`` kernel
from Python (``torch.library``); every override is destroyed again, also when the test
fails, which restores PyTorch's own kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import textwrap
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

from amp_conformance.__main__ import main
from amp_conformance.checks.case import Case
from amp_conformance.checks.coverage import check as coverage
from amp_conformance.checks.numerics.check import check_numerics
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.core.dispatch import OBSERVER_KEY, release_shared, shared_observer
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpListError


@contextlib.contextmanager
def overridden(op: str, key: str, kernel: Callable) -> Iterator[None]:
    """Replace the ``key`` kernel of ``aten::op`` by ``kernel`` for the block."""
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore", UserWarning)
            lib.impl(op, kernel, key)
        yield
    finally:
        lib._destroy()


def below(key: str):
    """Run the op below the autocast key, as an autocast kernel does after casting."""
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key)))


def mm_kept_fp32(a, b):
    with below("AutocastCUDA"):
        return torch.ops.aten.mm(a, b)


def softmax_ignores_dtype(x, dim, dtype=None):
    with below("AutocastCUDA"):
        return torch.ops.aten.softmax.int(x.float(), dim)


def bce_not_banned(x, target, weight=None, reduction=1):
    with below("AutocastCUDA"):
        return torch.ops.aten.binary_cross_entropy(x, target, weight, reduction)


def max_pool3d_lower(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    dtype = torch.get_autocast_dtype("cpu")
    with below("AutocastCPU"):
        return torch.ops.aten.max_pool3d(x.to(dtype), kernel_size, stride, padding, dilation, ceil_mode)


def _case(device: str, entry_id: str, dtype: torch.dtype, fake: bool) -> Case:
    entry = next(e for e in oplist.load(device).entries if e.id == entry_id)
    return Case(Target(device, fake=fake), dtype, entry)


# -- (a) a broken AutocastCUDA kernel is caught in --fake mode -----------------------


@pytest.mark.parametrize(
    "op, kernel, entry_id, words",
    [
        ("mm", mm_kept_fp32, "mm", "torch.mm inside autocast: output dtype torch.float32, "
                                   "expected torch.float16"),
        ("softmax.int", softmax_ignores_dtype, "softmax-dtype",
         "torch.softmax inside autocast: output dtype torch.float32, expected torch.float16"),
        ("binary_cross_entropy", bce_not_banned, "binary_cross_entropy",
         "ran inside autocast; a banned op must raise"),
    ],
)
def test_fake_cuda_catches_a_broken_kernel_and_restores_state(op, kernel, entry_id, words):
    case = _case("cuda", entry_id, torch.float16, fake=True)
    check_policy(case)  # PyTorch's own kernel conforms
    before = AutocastState.capture("cuda")
    with overridden(op, "AutocastCUDA", kernel):
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    assert words in str(info.value), str(info.value)
    assert f"entry {entry_id}" in str(info.value) and "cuda (fake)" in str(info.value)
    assert AutocastState.capture("cuda") == before, "the failing check left autocast state behind"
    check_policy(case)  # restored


def test_fake_suite_run_fails_naming_the_op(pytester):
    """The whole --fake suite, in a subprocess, with mm kept in float32 on AutocastCUDA."""
    pytester.makepyfile(
        mm_fp32_override=textwrap.dedent(
            """
            import torch

            _LIB = []

            def _mm(a, b):
                keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
                with torch._C._ExcludeDispatchKeyGuard(keys):
                    return torch.ops.aten.mm(a, b)

            def pytest_configure(config):
                lib = torch.library.Library("aten", "IMPL")
                lib.impl("mm", _mm, "AutocastCUDA")
                _LIB.append(lib)

            def pytest_unconfigure(config):
                while _LIB:
                    _LIB.pop()._destroy()
            """
        )
    )
    result = pytester.runpytest_subprocess(
        "-p", "mm_fp32_override", "--pyargs", "amp_conformance.suite.test_oplist",
        "--device", "cuda", "--fake", "-k", "policy and -mm", "-p", "no:cacheprovider",
    )
    output = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 2, output[-3000:]
    assert "torch.mm inside autocast: output dtype torch.float32" in output, output[-3000:]
    assert "cuda (fake)" in output


# -- (b) a broken AutocastCPU kernel for an op PyTorch's own lists never touch --------


def test_cpu_max_pool3d_run_in_lower_precision_is_caught():
    case = _case("cpu", "max_pool3d", torch.bfloat16, fake=False)
    check_policy(case)
    check_numerics(case)
    with overridden("max_pool3d", "AutocastCPU", max_pool3d_lower):
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    message = str(info.value)
    assert "torch.max_pool3d inside autocast: output dtype torch.bfloat16, expected torch.float32" \
        in message, message
    check_policy(case)


# -- (c) coverage ---------------------------------------------------------------------


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


# -- (d) loader: [[exclude]] and derivation --------------------------------------------

HEADER = '[list]\ndevice = "cpu"\n\n'


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


def test_a_fake_tensor_of_an_absent_device_starts_no_real_device(monkeypatch, absent_device):
    """torch 2.11's FakeTensorMode made a real tensor of a fake cuda/xpu tensor's device
    whenever CUDA or XPU was available (``init_gpu_context``): fake xpu on a CUDA host raised
    "Torch not compiled with XPU enabled". Emulated by a context starter that raises so;
    the suite's fake context never calls it for the absent device, and puts it back."""
    from torch._subclasses import fake_tensor

    from amp_conformance.core.target import Target

    calls = []

    def starts_a_real_device(device):
        calls.append(device)
        raise RuntimeError(f"Torch not compiled with {device.type.upper()} enabled")

    monkeypatch.setattr(fake_tensor, "init_gpu_context", starts_a_real_device)
    with Target(absent_device, fake=True).tensors():
        made = torch.empty(2, device=absent_device) * 2
    assert made.device.type == absent_device and calls == []
    assert fake_tensor.init_gpu_context is starts_a_real_device
