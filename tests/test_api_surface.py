"""The api_surface family's checks (checks/api_surface) fail on autocast's Python API
(getters, is_autocast_enabled, the legacy custom_fwd, a device module's own getters)
disagreeing with the state, naming what broke, and pass on torch as it is; in-process, with
the selftest's mutants applied and undone."""

import pytest
import torch

from amp_conformance.checks.api_surface import check as api
from amp_conformance.core.errors import NotApplicable
from tests.mutants import CPU, FAKE_CUDA, fails, mutant


@pytest.mark.parametrize("name, check, args, words", [
    ("legacy-cpu-dtype-getter-diverges", api.check_legacy_getters, (CPU, torch.float16),
     ("pytorch#65786",)),
    ("noarg-is-autocast-enabled-any-device", api.check_noarg_is_autocast_enabled, (CPU,),
     ("CUDA's flag only",)),
    ("any-autocast-ignores-xpu", api.check_any_autocast_enabled, ("xpu",), ("xpu",)),
    ("disabled-cuda-region-warns", api.check_disabled_cuda_region_silent, (None,),
     ("pytorch#67598",)),
    ("vector_norm-casts-float64", api.check_norm_float64, (CPU, torch.bfloat16),
     ("float64 input -> torch.float32",)),
    ("legacy-cuda-custom_fwd-ignores-cast_inputs", api.check_legacy_custom_fwd,
     (FAKE_CUDA, torch.bfloat16), ("cast_inputs",)),
])
def test_api_checks_catch_their_mutants(name, check, args, words):
    if name == "disabled-cuda-region-warns" and torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with mutant(name):
        fails(check, *args, words=words)


def test_api_checks_pass_on_torch_as_is():
    api.check_legacy_getters(CPU, torch.float16)
    api.check_noarg_is_autocast_enabled(FAKE_CUDA)
    api.check_any_autocast_enabled("xpu")
    api.check_legacy_custom_fwd(FAKE_CUDA, torch.float16)
    api.check_append_dtype_overloads(FAKE_CUDA, torch.float16)
    with pytest.raises(NotApplicable, match="registers none of"):
        api.check_append_dtype_overloads(CPU, torch.bfloat16)


def test_any_autocast_gaps_are_bounded_by_version():
    assert api.any_autocast_gap("mtia", "2.12.1") is not None
    assert api.any_autocast_gap("mtia", "2.13.0") is None
    assert api.any_autocast_gap("mps", "2.13.0") is not None
    assert api.any_autocast_gap("cuda", "2.13.0") is None


def test_device_module_api_check_uses_what_the_module_has(monkeypatch):
    """No in-tree device module has its own autocast getters; a backend's that agrees
    passes, one that disagrees fails."""
    with pytest.raises(NotApplicable, match="no autocast getters or setters"):
        api.check_device_module_api(CPU, torch.float16)
    monkeypatch.setattr(torch.cpu, "get_autocast_dtype", lambda: torch.get_autocast_dtype("cpu"),
                        raising=False)
    monkeypatch.setattr(torch.cpu, "set_autocast_enabled",
                        lambda on: torch.set_autocast_enabled("cpu", on), raising=False)
    api.check_device_module_api(CPU, torch.float16)
    monkeypatch.setattr(torch.cpu, "get_autocast_dtype", lambda: torch.bfloat16, raising=False)
    fails(api.check_device_module_api, CPU, torch.float16, words=("get_autocast_dtype",))
