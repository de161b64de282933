"""The autocast API beyond torch.autocast: legacy and device-module getters and setters,
_is_any_autocast_enabled, legacy custom_fwd/custom_bwd, absent-CUDA warnings, and the
fp32_append_dtype norms with float64 inputs."""

import pytest
import torch

from amp_conformance.checks.api_surface import check as api
from amp_conformance.core import devices
from amp_conformance.core.errors import NotApplicable
from amp_conformance.core.state import unchanged_autocast_state
from amp_conformance.core.target import fake_autograd_reason
from amp_conformance.schema import messages

pytestmark = pytest.mark.amp_check("api_surface")


@pytest.fixture
def checked(amp_target):
    """Run a check with the autocast state proven unchanged; NotApplicable -> skipped."""
    def run(check, *args):
        with unchanged_autocast_state(amp_target.device, "the check"):
            try:
                check(*args)
            except NotApplicable as exc:
                pytest.skip(str(exc))
    return run


def test_noarg_is_autocast_enabled_means_cuda(amp_device, amp_target, checked):
    """torch.is_autocast_enabled() without a device reports CUDA's flag only."""
    checked(api.check_noarg_is_autocast_enabled, amp_target)


def _device_types():
    params = []
    for name in devices.known_device_types():
        gap = api.any_autocast_gap(name)
        marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


@pytest.mark.parametrize("device_type", _device_types())
def test_any_autocast_enabled(amp_device, device_type, checked):
    """torch._C._is_any_autocast_enabled() is true when any one device type's flag is on."""
    checked(api.check_any_autocast_enabled, device_type)


def test_legacy_dtype_getters(amp_target, amp_dtype, checked):
    """torch.get_autocast_cpu_dtype()/get_autocast_gpu_dtype() return the very dtype of
    torch.get_autocast_dtype(device) (pytorch#65786)."""
    checked(api.check_legacy_getters, amp_target, amp_dtype)


def test_device_module_getters_setters(amp_target, amp_dtype, checked):
    """torch.<device>'s own autocast getters/setters, where present, agree with torch's."""
    checked(api.check_device_module_api, amp_target, amp_dtype)


def test_legacy_custom_fwd(amp_target, amp_dtype, checked):
    """torch.<device>.amp.custom_fwd warns and acts like torch.amp.custom_fwd(device_type=...)."""
    checked(api.check_legacy_custom_fwd, amp_target, amp_dtype)


def test_legacy_custom_bwd(amp_target, amp_dtype, checked):
    """torch.<device>.amp.custom_bwd warns and runs backward in the forward's state."""
    if not api.legacy_decorators(amp_target.device):
        pytest.skip(f"not applicable: torch.{amp_target.device}.amp has no legacy custom_fwd/"
                    f"custom_bwd (torch {torch.__version__} has them for cuda only)")
    reason = fake_autograd_reason(amp_target)
    if reason:
        pytest.skip(reason)
    checked(api.check_legacy_custom_bwd, amp_target, amp_dtype)


def test_disabled_cuda_region_does_not_warn(amp_device, checked):
    """Where CUDA is absent, disabled CUDA regions warn nothing (pytorch#67598)."""
    if torch.cuda.is_available():
        pytest.skip("not applicable: CUDA is available here; the check is about CUDA absent")
    notice = messages.expected("legacy_autocast_deprecated")
    checked(api.check_disabled_cuda_region_silent,
            notice.text.format(device="cuda") if notice else None)


def test_norm_float64_stays_float64(amp_target, amp_dtype, checked):
    """torch.norm / torch.linalg norms of a float64 input stay float64 under autocast."""
    checked(api.check_norm_float64, amp_target, amp_dtype)


def test_append_dtype_overloads(amp_target, amp_dtype, checked):
    """The device's fp32_append_dtype norm overloads: float64 stays, others give float32."""
    checked(api.check_append_dtype_overloads, amp_target, amp_dtype)
