"""The wrapper tier's region swap, predicate and scaler shapes (issue 48): declarations, the
sound ones passing on cpu and on a fake cuda device, each planted broken one failing naming
itself and its promise, the state left as found."""

import dataclasses
import re

import pytest
import torch

from amp_conformance.checks.wrappers import (
    DeclarationError,
    Predicate,
    RegionSwap,
    Scaler,
    failure,
    other_devices,
    planted_shapes,
    predicate,
    scaling,
    swap,
    validate,
)
from amp_conformance.checks.wrappers.cases import cases
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState

SUITE = ("--pyargs", "amp_conformance.suite.test_wrappers")
SHAPES = "amp_conformance.checks.wrappers.planted_shapes"
SWAP, PREDICATE, PREDICATE_TYPE, GRAD_SCALER, HELPER = planted_shapes.REFERENCE
ID = re.compile(r"(test_wrapper_\w+\[[^\]]+\])")


@pytest.mark.parametrize("decl,field,value", [
    (SWAP, "make", None), (SWAP, "to", torch.float32), (SWAP, "outside", "fallback"),
    (PREDICATE, "answers", True), (PREDICATE, "takes", "module"),
    (GRAD_SCALER, "make", 3), (GRAD_SCALER, "step", None), (GRAD_SCALER, "clips", "yes"),
    (GRAD_SCALER, "devices", ())], ids=lambda v: getattr(v, "name", str(v)))
def test_a_bad_field_of_a_new_shape_is_one_error_naming_it(decl, field, value):
    with pytest.raises(DeclarationError) as info:
        validate(dataclasses.replace(decl, **{field: value}))
    assert info.value.field == field and repr(decl.name) in str(info.value)


def test_the_items_and_their_ids():
    ids = [c.id for c in cases(planted_shapes.REFERENCE, "cpu", (torch.bfloat16, torch.float16))]
    assert ids[:5] == [f"cpu-bfloat16-planted.sound_swap-{c}" for c in
                       ("state", "restored", "nesting", "outside", "devices")]
    assert "cpu-float16-torch.is_autocast_enabled-device_type-nesting" in ids
    assert [i for i in ids if "GradScaler" in i] == [
        f"cpu-torch.amp.GradScaler-{c}" for c in ("scales", "skips", "unscale", "state_dict")]
    assert ids == [c.id for c in cases(planted_shapes.REFERENCE, "cpu",
                                       (torch.bfloat16, torch.float16))]
    assert not cases(planted_shapes.REFERENCE, "xpu", (torch.float16,))


def test_the_sound_shapes_pass_on_cpu(pytester):
    result = pytester.runpytest(*SUITE, "--wrapper", f"{SHAPES}:REFERENCE", "-p",
                                "no:cacheprovider")
    result.assert_outcomes(passed=30)


def test_the_sound_shapes_pass_on_a_fake_cuda_device(pytester):
    """Only the scaler's autograd checks are skipped there, with why; none fails."""
    result = pytester.runpytest(*SUITE, "--device", "cuda", "--fake", "--wrapper",
                                f"{SHAPES}:REFERENCE", "-p", "no:cacheprovider", "-rs", "-v")
    result.assert_outcomes(passed=24, skipped=6)
    skipped = sorted(m.group(1) for line in result.outlines if "SKIPPED" in line
                     for m in [ID.search(line)] if m)
    assert all("test_wrapper_scaler" in s for s in skipped)
    result.stdout.fnmatch_lines(["*not applicable in --fake mode: autograd on fake cuda*"])


def _case(decl, check, dtype=torch.float16):
    return next(c for c in cases([decl], "cpu", (dtype,)) if c.check == check)


BROKEN = [
    (RegionSwap, {"make": planted_shapes.swap_of("no_restore_on_error")}, swap.check_restored,
     "restored", failure.SWAP_RESTORED, "after an exception inside it: dtype"),
    (RegionSwap, {"make": planted_shapes.swap_of("reads_other")}, swap.check_state, "state",
     failure.SWAP_STATE, "inside the swap: enabled=True, dtype=float16; expected"),
    (RegionSwap, {"make": planted_shapes.swap_of("reads_other")}, other_devices.check_devices,
     "devices", failure.READS_OTHER, "it reads cuda's state"),
    (RegionSwap, {"make": planted_shapes.swap_of("enters")}, swap.check_outside, "outside",
     failure.SWAP_OUTSIDE, "expected autocast off"),
    (RegionSwap, {"make": lambda d: torch.autocast(d, dtype=torch.bfloat16, enabled=False)},
     swap.check_nesting, "nesting", failure.SWAP_NESTING, "inside the swap in itself"),
    (Predicate, {"answers": planted_shapes.reads_other}, predicate.check_state, "state",
     failure.PREDICATE, "inside the region: answered False"),
    (Predicate, {"answers": planted_shapes.reads_other}, predicate.check_nesting, "nesting",
     failure.PREDICATE_NESTED, "where only cuda's autocast is on: answered True"),
    (Predicate, {"answers": lambda x: torch.get_autocast_dtype(x.device.type) is not None},
     predicate.check_state, "state", failure.PREDICATE, "outside any region: answered True"),
    (Scaler, {"make": planted_shapes.helper_of("unscaled_backward")}, scaling.check_scales,
     "scales", failure.SCALES, "backward received the loss itself"),
    (Scaler, {"make": planted_shapes.helper_of("never_skips")}, scaling.check_skips, "skips",
     failure.SKIPS, "step 2 has an inf in a gradient and must be skipped"),
    (Scaler, {"make": planted_shapes.helper_of("unscales_twice")}, scaling.check_unscale,
     "unscale", failure.UNSCALE_ONCE, "differs from the unscaled control"),
    (Scaler, {"make": planted_shapes.helper_of("no_load")}, scaling.check_state_dict,
     "state_dict", failure.ROUND_TRIP, "a fresh scaler's state_dict() is"),
    (Scaler, {"make": lambda d: torch.amp.GradScaler(d, enabled=False),
              "step": GRAD_SCALER.step}, scaling.check_skips,
     "skips", failure.SKIPS, "its state_dict() is empty"),
]


@pytest.mark.parametrize("kind,fields,check,name,promise,detail", BROKEN,
                         ids=[f"{b[0].__name__}-{b[3]}-{i}" for i, b in enumerate(BROKEN)])
def test_each_broken_shape_fails_naming_itself_and_its_promise(kind, fields, check, name,
                                                               promise, detail):
    sound = {RegionSwap: SWAP, Predicate: PREDICATE, Scaler: HELPER}[kind]
    decl = dataclasses.replace(sound, name="broken", **fields)
    before = AutocastState.capture("cpu")
    grad, default = torch.is_grad_enabled(), torch.get_default_dtype()
    with pytest.raises(ConformanceFailure) as info:
        check(_case(decl, name, torch.bfloat16 if kind is Predicate else torch.float16))
    message = str(info.value)
    assert message.startswith("wrapper broken ")
    assert f"broken promise: {promise}" in message and detail in message, message
    assert "reproduce:" in message
    assert before.diff(AutocastState.capture("cpu")) == [], "the check restores the state"
    assert (torch.is_grad_enabled(), torch.get_default_dtype()) == (grad, default)


def test_a_predicate_answering_for_float16_only_fails_in_a_bfloat16_region_alone():
    decl = dataclasses.replace(PREDICATE, answers=planted_shapes.float16_only)
    predicate.check_state(_case(decl, "state", torch.float16))
    with pytest.raises(ConformanceFailure, match="inside the region: answered False"):
        predicate.check_state(_case(decl, "state", torch.bfloat16))


def test_a_scaler_that_does_not_clip_skips_the_unscale_check_with_why(pytester):
    pytester.makepyfile(decl=f'''
        import dataclasses
        from {SHAPES} import REFERENCE
        WRAPPERS = [dataclasses.replace(REFERENCE[3], name="noclip", clips=False)]
    ''')
    result = pytester.runpytest(*SUITE, "--wrapper", "decl:WRAPPERS", "-k", "unscale", "-rs",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*not applicable: noclip declares clips=False*"])
