"""torch.compile and torch.export under autocast (the compile_regions family, and the
compiled tier: the compiled_policy family).

- ``test_compile_region``: the scenario table of ``checks/compile_regions/regions.py``, one item per
  amp dtype, backend (eager and aot_eager always; the ``--amp-compile`` backend too) and
  scenario; a scenario that shows a known upstream defect is a strict xfail naming it.
- ``test_export_keeps_regions``: torch.export keeps the regions and runs them as eager.
- ``test_export_region``: every scenario through torch.export, strict and non-strict, its
  program and core-ATen decomposition against eager.
- ``test_export_region_raises``: an exception raised in a region reaches the caller of
  torch.export unchanged (strict and non-strict), the autocast state restored.
- ``test_compiled_policy``: opt-in (``--amp-compile BACKEND``), per op-list entry.
"""

import pytest

from amp_conformance.checks import compiling, defects
from amp_conformance.checks.compile_regions import export, regions
from amp_conformance.checks.compiled_policy import per_entry
from amp_conformance.checks.fake_casts import FakeTierLimit


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """No item may reuse another's graphs or guards (each check also resets around its
    compiles; this covers a check that fails half-way)."""
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.amp_check("compile_regions")
def test_compile_region(amp_settings, amp_target, amp_dtype, compile_backend, scenario):
    """The scenario compiled gives eager's outputs, observed state and exceptions, call by
    call, and restores the autocast state exactly."""
    reason = regions.not_applicable(scenario, amp_target, amp_dtype, compile_backend,
                                    amp_settings.compile_backend)
    if reason:
        pytest.skip(reason)
    try:
        regions.check(scenario, amp_target, amp_dtype, compile_backend, amp_settings.numerics)
    except FakeTierLimit as exc:
        pytest.skip(str(exc))


@pytest.mark.amp_check("compile_regions")
def test_export_keeps_regions(amp_target, amp_dtype):
    """torch.export keeps each region in the graph; the program and its decomposition run
    with eager's dtypes and values."""
    if amp_target.fake:
        pytest.skip(f"not applicable in --fake mode: torch.export traces torch.autocast("
                    f"{amp_target.device!r}), which refuses the absent device")
    export.check_export(amp_target, amp_dtype, regions.other_dtype(amp_target, amp_dtype))


@pytest.mark.amp_check("compile_regions")
@pytest.mark.parametrize("strict", [False, True], ids=["non_strict", "strict"])
def test_export_region_raises(amp_target, amp_dtype, strict, record_property):
    """The module's exception, raised in a region, an enabled=False region in it or a
    region of the other dtype in it, is what torch.export raises; the state is restored.
    Each mode's known defect is recorded (strict: the exception named only in dynamo's
    text; non-strict, before 2.9: nothing raised)."""
    if amp_target.fake:
        pytest.skip(f"not applicable in --fake mode: torch.export traces torch.autocast("
                    f"{amp_target.device!r}), which refuses the absent device")
    blocked = compiling.compiles_nothing() if strict else None
    if blocked:  # strict export traces with dynamo
        pytest.skip(blocked)
    reproduced = export.check_export_raises(
        amp_target, amp_dtype, regions.other_dtype(amp_target, amp_dtype), strict)
    if defects.registry()[export.DEFECTS[strict]].applies():
        record_property(defects.PROPERTY, defects.record_of(
            export.DEFECTS[strict], defects.REPRODUCED if reproduced else defects.FIXED))


@pytest.mark.amp_check("compile_regions")
def test_export_region(amp_settings, amp_target, amp_device, export_mode, export_scenario,
                       record_property):
    """The scenario exported (strict or non-strict) in each of its ambient states, with the
    run's first amp dtype (the other one is the scenarios' "other"): the program and its
    core-ATen decomposition, run in that state, give eager's outputs, observed state and
    exceptions, the state restored; a departure that PyTorch's recorded defect accounts
    for, shown on the call itself, is recorded as reproduced."""
    amp_dtype = amp_settings.amp_dtypes[0]
    if amp_target.fake:
        pytest.skip(f"not applicable in --fake mode: torch.export traces torch.autocast("
                    f"{amp_target.device!r}), which refuses the absent device")
    reason = export.not_applicable(export_scenario, amp_target, amp_dtype, export_mode)
    if reason:
        pytest.skip(reason)
    blocked = compiling.compiles_nothing() if export_mode == "strict" else None
    if blocked:  # strict export traces with dynamo
        pytest.skip(blocked)
    for defect in export.check_scenario_export(export_scenario, amp_target, amp_dtype,
                                               export_mode, amp_settings.numerics):
        record_property(defects.PROPERTY, defects.record_of(defect, defects.REPRODUCED))


@pytest.mark.amp_check("compiled_policy")
def test_compiled_policy(amp_case, record_property):
    """Each variant of the entry, with its autocast region, compiled with the --amp-compile
    backend, gives eager's dtypes and values (bitwise, or close for code generators), or
    what PyTorch does today where the entry records a defect (the item records which)."""
    per_entry.check_compiled_policy(amp_case, record_property)
