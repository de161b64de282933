"""The GradScaler tier: its checks catch broken kernels and scaler methods (in process,
naming the kernel or method and the case), its model is right, and it skips what a
vendor declares absent or what fake tensors cannot show."""

import math

import pytest
import torch

from amp_conformance.checks.gradscaler import cases, kernels, protocol, scaler, training
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target

CATALOGUE = mutants()

CPU = Target("cpu")


def _unscale(case_id: str):
    case = next(c for c in cases.UNSCALE_CASES if c.id == case_id)
    return lambda: kernels.check_unscale(CPU, case, "bitwise")


def _update(case_id: str):
    case = next(c for c in cases.UPDATE_CASES if c.id == case_id)
    return lambda: kernels.run_update_sequence("cpu", case, "bitwise")


#: mutant -> the check (one case of it) that must catch it, in process
CATCHERS = {
    "unscale-ignores-nan": _unscale("nan"),
    "unscale-ignores-neg-inf": _unscale("neg_inf"),
    "unscale-clears-found-inf": _unscale("found_inf-accumulates"),
    "unscale-no-bfloat16": _unscale("bfloat16"),
    "unscale-inv-scale-in-grad-dtype": _unscale("inv_scale-third"),
    "unscale-strided-grads-copied": _unscale("sliced"),
    "update-never-backs-off": _update("backoff"),
    "update-tracker-not-reset": _update("backoff"),
    "update-grows-too-early": _update("growth"),
    "step-not-skipped-on-inf": lambda: scaler.check_step("cpu", math.inf),
    "load-state-dict-drops-growth-tracker": lambda: scaler.check_state_dict("cpu", True),
    "unscale-twice-allowed": lambda: scaler.check_unscale_once("cpu"),
    "fused-step-ignores-inf": lambda: training.check_training(
        CPU, torch.bfloat16, cases.OPTIMIZERS[0], "fused"),
    "fused-step-unscales-twice": lambda: training.check_training(
        CPU, torch.bfloat16, cases.OPTIMIZERS[1], "fused", "unscale"),
    "fused-step-on-inf-after-unscale": lambda: training.check_training(
        CPU, torch.bfloat16, cases.OPTIMIZERS[0], "fused", "clip"),
    "update-replaces-scale-tensor": lambda: protocol.check_state_identity("cpu"),
    "step-overwrites-optimizer-grad-scale": lambda: protocol.check_optimizer_protocol(
        "cpu", "user_grad_scale"),
    "found-inf-lost-between-dtypes": lambda: protocol.check_dtype_groups("cpu", 0),
}


def test_every_gradscaler_mutant_has_an_in_process_catcher():
    mine = {n for n, m in CATALOGUE.items() if "gradscaler" in m.select}
    assert mine == set(CATCHERS)
    assert 6 <= len(mine) <= 20


@pytest.mark.parametrize("name", sorted(CATCHERS))
def test_check_fails_on_mutant_naming_it_and_passes_once_undone(name):
    mutant = CATALOGUE[name]
    undo = mutant.apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            CATCHERS[name]()
    finally:
        undo()
    for text in mutant.expected_texts:
        assert text in str(info.value), str(info.value)
    CATCHERS[name]()  # undone: the same check passes again


def test_mutants_undo_restores_kernels_and_methods():
    methods = {k: v for k, v in vars(torch.amp.GradScaler).items() if not k.startswith("__")}
    grads, found = [torch.tensor([4.0, math.nan])], torch.zeros(())
    for name in CATCHERS:
        CATALOGUE[name].apply()()
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.tensor(0.5))
    assert found.item() == 1.0 and grads[0][0].item() == 2.0
    scale, tracker = torch.tensor(4.0), torch.tensor(0, dtype=torch.int32)
    torch._amp_update_scale_(scale, tracker, torch.tensor(1.0), 2.0, 0.5, 1)
    assert (scale.item(), tracker.item()) == (2.0, 0)
    assert {k: v for k, v in vars(torch.amp.GradScaler).items()
            if not k.startswith("__")} == methods


# -- the model of the update rule ------------------------------------------------------------


def test_model_update_rule():
    step = kernels.model_update(4.0, 1, 0.0, 2.0, 0.5, 2)
    assert (step.scale, step.tracker) == (8.0, 0) and step.event.startswith("growth step")
    step = kernels.model_update(4.0, 1, 1.0, 2.0, 0.5, 2)
    assert (step.scale, step.tracker) == (2.0, 0) and step.event.startswith("back-off step")
    step = kernels.model_update(4.0, 0, 0.0, 2.0, 0.5, 2)
    assert (step.scale, step.tracker) == (4.0, 1)
    big = kernels.f32(2.0**127)
    assert kernels.model_update(big, 0, 0.0, 2.0, 0.5, 1).scale == big  # overflow refused
    assert kernels.f32(1 / 3) != 1 / 3 and kernels.f32(1e39) == math.inf


def test_unscale_failure_names_kernel_device_dtype_and_case():
    undo = CATALOGUE["unscale-ignores-nan"].apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            _unscale("bfloat16-nan")()
    finally:
        undo()
    message = str(info.value)
    for words in ("torch._amp_foreach_non_finite_check_and_unscale_ on cpu",
                  "case 'bfloat16-nan'", "bfloat16[20,20]", "found_inf is 0.0, expected 1.0"):
        assert words in message, message


# -- skips: capabilities and fake tensors ---------------------------------------------------


def test_declared_capabilities_skip_fused_and_sparse_with_their_reason(pytester):
    caps = pytester.makefile(".toml", caps='[capabilities]\nfused_optimizers = false\n'
                             'sparse_grads = false\n[reasons]\nsparse_grads = "no COO"\n')
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "-rs", "-q",
                                "--capabilities", str(caps), "-k",
                                "gradscaler_training_fused or gradscaler_sparse")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    # fused: per optimizer and order; sparse: its cases and the embedding per amp dtype
    fused = len(cases.OPTIMIZERS) * len(cases.ORDERS)
    sparse = len(cases.SPARSE_CASES) + 2
    assert outcomes.get("skipped") == fused + sparse and not {"passed", "failed"} & set(outcomes), out[-2000:]
    assert "device declares no fused optimizers" in out
    assert "device declares no sparse gradients (no COO)" in out


def test_fake_tier_checks_kernel_layouts_and_skips_the_rest_with_reason(pytester):
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "-rs", "-q",
                                "--device", "cuda", "--fake", "-k", "gradscaler")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    meta = len(cases.UNSCALE_CASES) + len(cases.UPDATE_CASES)
    assert outcomes.get("passed") == meta and "failed" not in outcomes, out[-2000:]
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert reasons and all("not applicable in --fake mode: " in r for r in reasons), reasons



# -- PyTorch's CUDA unscale kernels without bfloat16 (reference defect) -------------------


def _case(case_id: str) -> cases.UnscaleCase:
    return next(c for c in cases.UNSCALE_CASES if c.id == case_id)


def test_the_cuda_bfloat16_unscale_gap_is_known_only_where_it_was_seen():
    """Seen on torch 2.11.0+cu130 (H100): only a real CUDA device with a bfloat16 gradient."""
    cuda = Target("cuda")
    assert kernels.known_defect(cuda, _case("bfloat16")) == kernels.CUDA_NO_BF16
    assert kernels.known_defect(cuda, _case("mixed-float32-float16-bfloat16")) == kernels.CUDA_NO_BF16
    assert kernels.known_defect(cuda, _case("float16")) is None
    assert kernels.known_defect(Target("cuda", fake=True), _case("bfloat16")) is None
    assert kernels.known_defect(CPU, _case("bfloat16")) is None
    assert kernels.known_defect(Target("xpu"), _case("bfloat16")) is None


@pytest.fixture
def unscale_without_bfloat16():
    """The CPU unscale kernel replaced by CUDA's answer to bfloat16 in torch 2.11:
    NotImplementedError in AT_DISPATCH's words (the tests below pass only bfloat16)."""
    lib = torch.library.Library("aten", "IMPL")

    def unscale(grads, found_inf, inv_scale):
        raise NotImplementedError('"_amp_foreach_non_finite_check_and_unscale_cuda" not '
                                  "implemented for 'BFloat16'")

    lib.impl("_amp_foreach_non_finite_check_and_unscale_", unscale, "CPU")
    yield
    lib._destroy()


def test_a_missing_bfloat16_unscale_kernel_fails_naming_it_and_reproduces_the_defect(
        unscale_without_bfloat16):
    from amp_conformance.checks import defects

    case = _case("bfloat16")
    for check in (lambda: kernels.check_unscale(CPU, case, "bitwise"),
                  lambda: kernels.check_unscale_meta(CPU, case)):
        with pytest.raises(ConformanceFailure, match="has no implementation for gradients of "
                                                     "dtypes bfloat16: .*'BFloat16'"):
            check()
        recorded: dict = {}
        defects.known_departure(kernels.CUDA_NO_BF16, check, kernels.NO_KERNEL,
                                recorded.__setitem__)
        assert recorded[defects.PROPERTY]["status"] == "reproduced"


def test_a_capturable_optimizer_is_not_applicable_only_where_it_fails_alone():
    adam = next(c for c in cases.CAPTURABLE if c.id == "adam")
    alone = training.refusal(adam, "capturable", "cpu")  # torch keeps no capturable cpu state
    assert isinstance(alone, AssertionError) and "capturable" in str(alone)
    assert training.refusal(adam, "foreach", "cpu") is None
