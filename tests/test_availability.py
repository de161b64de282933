"""Whether a device is here, asked the way its backend answers (core/devices.availability).

In-tree devices and PrivateUse1 backends answer through ``torch.<name>.is_available()``;
an out-of-tree backend without such a module (PyTorch/XLA has no ``torch.xla``) is probed
by making a tensor on ``<name>:0``; a backend may answer for itself through the hook
``pytest_amp_conformance_device_available``. An absent device's usage error says what was
tried.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from amp_conformance.core import devices

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fakegpu"
SUITE = ("--pyargs", "amp_conformance.suite.test_oplist")


def test_a_device_module_answers(absent_device):
    found = devices.availability(absent_device)
    assert not found.present
    assert found.how == f"torch.{absent_device}.is_available() is false"


@pytest.mark.parametrize("device", ["maia", "ipu"])
def test_a_device_without_a_module_is_probed(device):
    """No torch.<name> module: a tensor on <name>:0 is tried, and what it raised is said."""
    if devices.device_module(device) is not None:
        pytest.skip(f"torch {torch.__version__} has a torch.{device} module")
    found = devices.availability(device)
    assert not found.present
    assert found.how.startswith(f"there is no torch.{device} module, and "
                                f"torch.empty(1, device='{device}:0') raised "), found.how


def test_the_probe_is_not_answered_by_a_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert not devices.availability("maia").present


def test_a_backend_without_is_available_is_probed_and_found():
    """A PrivateUse1 backend whose device module has no is_available() (the fakegpu example
    with it removed) is present when a tensor can be made on it."""
    code = textwrap.dedent("""
        import torch, fakegpu_backend
        del type(torch.fakegpu).is_available
        from amp_conformance.core import devices
        found = devices.availability("fakegpu")
        print(found.present, found.how)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(EXAMPLE),
                                                                     os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ("True torch.fakegpu has no is_available(); a tensor was "
                                   "made on 'fakegpu:0'"), proc.stdout


def test_the_usage_error_says_what_was_tried(pytester):
    result = pytester.runpytest(*SUITE, "--device", "maia")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*device 'maia' is not available here (there is no torch.maia "
                                 "module, and torch.empty(1, device='maia:0') raised *--fake*"])


def test_the_backend_hook_answers_first(pytester, absent_device):
    pytester.makeconftest("""
        def pytest_amp_conformance_device_available(config, device):
            return (False, "no card in slot 3") if device != "cpu" else None
    """)
    result = pytester.runpytest(*SUITE, "--device", absent_device)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*device '{absent_device}' is not available here (the "
                                 "backend's hook said False (no card in slot 3))*"])
    assert not devices._DECLARED, "the hook's answer outlived its run"


def test_a_malformed_hook_answer_is_a_usage_error(pytester):
    pytester.makeconftest("""
        def pytest_amp_conformance_device_available(config, device):
            return "yes"
    """)
    result = pytester.runpytest(*SUITE, "--device", "cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*hook pytest_amp_conformance_device_available: returned "
                                 "'yes'; expected True, False, (present, why) or None*"])
