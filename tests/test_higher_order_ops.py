"""The higher_order_ops family (checks/higher_order_ops): a HOP that loses autocast, eagerly
or compiled, fails naming the HOP, its API and the backend; every HOP of the running torch
is run or declared internal; a HOP's own limit is proven outside autocast before it is
excused."""

import dataclasses

import pytest
import torch

from amp_conformance.checks import defects, registry
from amp_conformance.checks.higher_order_ops import check, hops
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from tests.mutants import CPU, mutant

CATALOGUE = registry.mutants()


@pytest.mark.parametrize("name", [m for m, x in CATALOGUE.items()
                                  if x.family == "higher_order_ops"])
def test_every_mutant_of_the_family_is_caught_naming_what_broke(name):
    m = CATALOGUE[name]
    _, backend, hop = m.select.split(" and ")[1].split("-", 2)
    with mutant(name), pytest.raises(ConformanceFailure) as info:
        check.check(check.by_name(hop), CPU, torch.bfloat16, backend)
    for text in m.expected_texts:
        assert text in str(info.value), str(info.value)
    check.check(check.by_name(hop), CPU, torch.bfloat16, backend)  # undone: it passes


def test_the_compiled_mutant_leaves_the_uncompiled_hop_alone():
    with mutant("hop-cond-compiled-drops-region"):
        check.check(check.by_name("cond"), CPU, torch.bfloat16, check.UNCOMPILED)


def test_a_hop_new_in_a_release_is_uncovered_until_it_is_run_or_declared():
    from torch._ops import _higher_order_ops

    class NewHop(torch._ops.HigherOrderOperator):
        def __call__(self, *args):
            return super().__call__(*args)

    new = NewHop("amp_conformance_test_hop")
    try:
        assert check.uncovered() == {new._name: "no scenario and no reason it has none"}
        with pytest.raises(ConformanceFailure, match="amp_conformance_test_hop"):
            check.check_coverage()
    finally:
        del _higher_order_ops[new._name]
    check.check_coverage()


def test_every_declared_hop_is_one_this_torch_or_another_release_has():
    """A name in the tables that no release registers is a typo, not a HOP: here, every
    scenario the running release has is registered, and the internal names it lacks are
    the triton wrappers (registered with triton) and the map of releases before 2.7."""
    from amp_conformance.schema.versions import release

    here = set(hops.registered())
    assert {h.name for h in hops.HOPS if h.since is None or release() >= h.since} <= here
    assert set(hops.INTERNAL) - here <= {"triton_kernel_wrapper_mutation",
                                         "triton_kernel_wrapper_functional", "map"}


def test_a_hop_that_raises_outside_autocast_too_is_not_applicable_and_one_inside_only_fails():
    def raising(message, inside_only):
        def call(env, inputs):
            def run():
                if torch.is_autocast_enabled("cpu") or not inside_only:
                    raise RuntimeError(message)
                return torch.mm(inputs.x, inputs.w)
            return run
        return dataclasses.replace(check.by_name("wrap"), call=call)
    with pytest.raises(NotApplicable, match="raises outside autocast too: RuntimeError: no "
                                            "kernel here"):
        check.check(raising("no kernel here", False), CPU, torch.bfloat16, check.UNCOMPILED)
    with pytest.raises(ConformanceFailure, match="it raises RuntimeError: only inside, the "
                                                 "computation without it runs"):
        check.check(raising("only inside", True), CPU, torch.bfloat16, check.UNCOMPILED)


def test_an_api_after_the_running_release_is_not_applicable():
    future = dataclasses.replace(check.by_name("scan"), since="99.0")
    assert "came in torch 99.0" in check.not_applicable(future, CPU, "aot_eager")
    assert check.not_applicable(check.by_name("scan"), CPU, "aot_eager") is None


def test_a_region_left_changed_by_the_hop_fails(monkeypatch):
    def leaky(env, inputs):
        def run():
            torch.set_autocast_dtype("cpu", torch.float16)
            return hops.body(env, inputs.w, inputs.x)
        return run
    hop = dataclasses.replace(check.by_name("wrap"), call=leaky)
    with pytest.raises(ConformanceFailure, match="the autocast state after the call differs"):
        check.check(hop, CPU, torch.bfloat16, check.UNCOMPILED)


def test_pytorchs_missing_autocast_kernel_of_a_hop_is_reproduced_and_another_key_fails():
    """A HOP falls through three Autocast keys only: inside another device's autocast it
    raises PyTorch's missing-kernel error, recorded as the defect; naming a key that is not
    the device's is a failure."""
    def no_kernel(key):
        def call(env, inputs):
            def run():
                if torch.is_autocast_enabled("cpu"):
                    raise NotImplementedError(f"{check.NO_KERNEL} cond at dispatch key "
                                              f"DispatchKey.{key} (resolved from {key})")
                return hops.body(env, inputs.w, inputs.x)
            return run
        return dataclasses.replace(check.by_name("wrap"), call=call)
    recorded = []
    check.check(no_kernel("AutocastCPU"), CPU, torch.bfloat16, check.UNCOMPILED,
                record=lambda *kv: recorded.append(kv))
    assert recorded == [("amp_defect", defects.record_of(check.NO_KERNEL_DEFECT, "reproduced"))]
    with pytest.raises(ConformanceFailure, match="DispatchKey.AutocastMPS"):
        check.check(no_kernel("AutocastMPS"), CPU, torch.bfloat16, check.UNCOMPILED)


def test_a_key_without_a_python_name_is_read_as_torch_prints_it():
    """AutocastXLA has no name in torch's DispatchKey enum: the error says "???" (seen with
    torch 2.9.0 and torch-xla 2.9.0)."""
    from amp_conformance.core.target import Target

    error = NotImplementedError(f"{check.NO_KERNEL} cond at dispatch key DispatchKey.??? "
                                "(resolved from DispatchKey.???)")
    assert check._no_kernel(error, Target("xla"))
    assert not check._no_kernel(error, Target("mps"))
