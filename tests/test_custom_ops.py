"""The custom_ops family (checks/custom_ops): every route passes on the real implementation
and leaves nothing registered behind; each of the family's mutants is caught in process,
naming what broke; a refused registration fails quoting torch and still removes what the
item defined. The conformance items themselves run on cpu, fake devices and the PrivateUse1
backends with the suite (tests/test_python_mode_backend.py, tests/test_vendor_workflow.py).
"""

from __future__ import annotations

import gc
import os

import pytest
import torch

from amp_conformance.checks.custom_ops import check, ops
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from tests.mutants import CPU, mutant

pytestmark = pytest.mark.usefixtures("state_restored")

ROUTES = pytest.mark.parametrize("route", ops.ROUTES, ids=[r.name for r in ops.ROUTES])


def _defined(qualname: str) -> bool:
    return torch._C._dispatch_has_kernel(qualname)


def _nothing_left(dtype: torch.dtype) -> None:
    for label in check.casts(dtype):
        assert not _defined(f"{ops.namespace()}::mm_{label}"), label
    assert not hasattr(getattr(torch.ops, ops.namespace()), "mm_to_amp")
    assert ops.SEEN == []


@ROUTES
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_each_route_passes_and_leaves_nothing_registered(route, dtype):
    check.check_forward(CPU, route, dtype)
    check.check_backward(CPU, route, dtype)
    _nothing_left(dtype)


@ROUTES
def test_fake_devices_are_held_to_the_dtypes(absent_device, route):
    from amp_conformance.core.target import Target

    check.check_forward(Target(absent_device, fake=True), route, torch.float16)
    _nothing_left(torch.float16)


def test_the_namespace_is_the_processs_own():
    assert ops.namespace() == f"amp_conformance_ops_{os.getpid()}"


def test_the_libraries_live_as_long_as_the_item():
    """A Library collected early would take its registrations with it: the rule must still
    apply after a collection inside the block."""
    route = ops.by_name("register_autocast.library_op")
    with ops.registered(route, "cpu", {"to_amp": torch.bfloat16}) as registered:
        gc.collect()
        assert _defined(f"{ops.namespace()}::mm_to_amp")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = registered["to_amp"](*check.inputs(CPU, torch.bfloat16))
        assert out.dtype == torch.bfloat16 and ops.SEEN[0][:2] == (torch.bfloat16,) * 2
    _nothing_left(torch.bfloat16)


def test_a_refused_registration_fails_quoting_torch_and_leaves_nothing(monkeypatch):
    """The second rule refused after the first was registered: the failure quotes torch,
    and both ops are gone."""
    real = torch.library.register_autocast

    def refuse_float32(op, device_type, cast_inputs, **kwargs):
        if cast_inputs == torch.float32:
            raise ValueError(f"Unknown device type: {device_type}")
        return real(op, device_type, cast_inputs, **kwargs)

    monkeypatch.setattr(torch.library, "register_autocast", refuse_float32)
    with pytest.raises(ConformanceFailure) as caught:
        check.check_forward(CPU, ops.by_name("register_autocast"), torch.bfloat16)
    assert "torch refused to register the rule for 'cpu': ValueError: Unknown device type: " \
        "cpu" in str(caught.value)
    _nothing_left(torch.bfloat16)


def _refuse_every_device(monkeypatch):
    def refuse(op, device_type, cast_inputs, **kwargs):
        raise ValueError(f"Unknown device type: {device_type}")

    monkeypatch.setattr(torch.library, "register_autocast", refuse)


def test_a_refusal_before_the_routes_release_is_shown_not_applicable(monkeypatch):
    """On a torch that predates the route for the device the item is skipped only on the
    refusal itself, quoted; the same torch registering it runs the item."""
    route = ops.by_name("register_autocast")
    monkeypatch.setitem(ops.REGISTER_AUTOCAST, "cpu", "99.0")
    check.check_forward(CPU, route, torch.bfloat16)  # registers: held to the rule
    _refuse_every_device(monkeypatch)
    with pytest.raises(ops.Unavailable) as caught:
        check.check_forward(CPU, route, torch.bfloat16)
    assert "from torch 99.0 on" in str(caught.value)
    assert "registering raised ValueError: Unknown device type: cpu" in str(caught.value)
    _nothing_left(torch.bfloat16)


def test_a_refusal_from_the_routes_release_on_is_a_failure(monkeypatch):
    _refuse_every_device(monkeypatch)
    with pytest.raises(ConformanceFailure, match="torch refused to register"):
        check.check_backward(CPU, ops.by_name("register_autocast"), torch.float16)
    _nothing_left(torch.float16)


MINE = sorted(n for n, m in mutants().items() if m.family == "custom_ops" and not m.fake)


def test_the_family_has_its_mutants():
    assert MINE == ["custom_ops-autocast-kernel-unreached",
                    "custom_ops-register_autocast-refuses-device",
                    "custom_ops-rule-casts-float64", "custom_ops-rule-casts-nothing",
                    "custom_ops-rule-casts-through-other-dtype",
                    "custom_ops-rule-cuts-gradient"]


@pytest.mark.parametrize("name", MINE)
def test_each_mutant_is_caught_naming_what_broke(name):
    m = mutants()[name]
    backward = "backward" in m.select
    route = ops.by_name("Library.impl" if "Library.impl" in m.select else "register_autocast")
    run = check.check_backward if backward else check.check_forward
    with mutant(name), pytest.raises(ConformanceFailure) as caught:
        run(CPU, route, torch.bfloat16)
    for text in m.expected_texts:
        assert text in str(caught.value)
    _nothing_left(torch.bfloat16)


def test_the_kernel_route_is_the_one_a_broken_custom_op_cast_spares():
    """The Library.impl route casts with the suite's own kernel: a broken cast in torch's
    custom-op rule fails the register_autocast routes and not it, so the routes differ."""
    with mutant("custom_ops-rule-casts-nothing"):
        check.check_forward(CPU, ops.by_name("Library.impl"), torch.bfloat16)
        with pytest.raises(ConformanceFailure, match="rule to_amp: the op received"):
            check.check_forward(CPU, ops.by_name("register_autocast.library_op"),
                                torch.bfloat16)
