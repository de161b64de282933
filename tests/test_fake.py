"""--fake (a device absent here, its autocast policy run through FakeTensorMode, core/target.py)
catches a broken device policy without the device.

Broken autocast implementations are emulated by overriding an ``Autocast<Device>`` kernel
from Python (``torch.library``); every override is destroyed again, also when the test
fails, which restores PyTorch's own kernel. A fake tensor of an absent device starts no
real device.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from amp_conformance.checks.policy.check import check_policy
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from tests.mutants import below, case_of, overridden


def mm_kept_fp32(a, b):
    with below("AutocastCUDA"):
        return torch.ops.aten.mm(a, b)


def softmax_ignores_dtype(x, dim, dtype=None):
    with below("AutocastCUDA"):
        return torch.ops.aten.softmax.int(x.float(), dim)


def bce_not_banned(x, target, weight=None, reduction=1):
    with below("AutocastCUDA"):
        return torch.ops.aten.binary_cross_entropy(x, target, weight, reduction)


# -- a broken AutocastCUDA kernel is caught in --fake mode ---------------------------


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
    case = case_of("cuda", entry_id, torch.float16, fake=True)
    check_policy(case)  # PyTorch's own kernel conforms
    before = AutocastState.capture("cuda")
    with overridden(op, "AutocastCUDA", kernel):
        with pytest.raises(ConformanceFailure) as info:
            check_policy(case)
    assert words in str(info.value), str(info.value)
    assert f"entry {entry_id}" in str(info.value) and "cuda (fake)" in str(info.value)
    assert AutocastState.capture("cuda") == before, "the failing check left autocast state behind"
    check_policy(case)  # restored


@pytest.mark.slow
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


# -- an absent device ----------------------------------------------------------------


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


# -- a fake device refuses what the device refuses ----------------------------------------


def test_a_fake_mps_refuses_the_kernels_mps_refuses():
    """MPS has no 3-D transposed convolution in float16 or bfloat16 (none at all before
    2.8): the fake raises the device's own error, and only for those inputs."""
    from amp_conformance.core.target import Target

    conv = torch.nn.functional
    with Target("mps", fake=True).tensors():
        x, w = torch.randn(2, 2, 4, 4, 4, device="mps"), torch.randn(2, 2, 3, 3, 3, device="mps")
        assert conv.conv3d(x.half(), w.half()).dtype == torch.float16
        with pytest.raises(RuntimeError, match="ConvTranspose 3D .*is not supported on MPS"):
            conv.conv_transpose3d(x.half(), w.half())
        if torch.__version__ >= "2.8":
            assert conv.conv_transpose3d(x, w).dtype == torch.float32


def test_a_dtype_a_vendor_declares_absent_is_refused_by_its_fake(pytester, tmp_path):
    """capabilities float64 = false: the device's fake raises making a float64 tensor of
    it, naming the declaration; withdrawn with the run."""
    from amp_conformance.core import devices

    caps = tmp_path / "caps.toml"
    caps.write_text('[capabilities]\nfloat64 = false\n[reasons]\nfloat64 = "no fp64 units"\n')
    pytester.makepyfile(test_declared='''
        import pytest, torch

        def test_refused(amp_target):
            with amp_target.tensors():
                assert torch.ones(2, device="xpu").dtype == torch.float32
                with pytest.raises(TypeError, match="xpu has no float64 tensors .*no fp64 units"):
                    torch.ones(2, dtype=torch.float64, device="xpu")
    ''')
    result = pytester.runpytest("--device", "xpu", "--fake", f"--capabilities={caps}")
    result.assert_outcomes(passed=1)
    assert torch.float64 not in devices.profile("xpu").refuses
