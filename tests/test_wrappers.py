"""The wrapper tier (issue 21): declarations, their resolution, the checks against the sound
reference wrappers and the planted broken ones, and a default run without the tier."""

import dataclasses
import re

import pytest
import torch

from amp_conformance.checks.registry import mutants
from amp_conformance.checks.wrappers import (
    DeclarationError,
    ForwardDecorator,
    failure,
    fake_device,
    forward,
    forward_contract,
    nesting,
    planted,
    region,
    validate,
)
from amp_conformance.checks.wrappers.cases import WrapperCase, cases, not_applicable
from amp_conformance.checks.wrappers.declare import RegionFactory
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target

CATALOGUE = mutants()

SUITE = ("--pyargs", "amp_conformance.suite.test_wrappers")
PLANTED = "amp_conformance.checks.wrappers.planted"
ID = re.compile(r"(test_wrapper_\w+\[[^\]]+\])")
REGION, FORWARD, ISLAND, RUNNER = planted.REFERENCE


def _ids(lines):
    return sorted({m.group(1) for line in lines for m in [ID.search(line)] if m})


# -- declarations ------------------------------------------------------------------------

BAD_REGION = [("name", "has space"), ("devices", ()), ("devices", ["cpu"]), ("make", None),
              ("precisions", {}), ("precisions", {"fp32": torch.float32}),
              ("float32", "fallback"), ("unknown", "ignore"), ("noop_devices", {"cpu": ""}),
              ("float32_unclaimed", {"cpu": ""}), ("float32_unclaimed", {"mps": "why"}),
              ("single_use", None), ("ambient_dtype", ("not_a_precision",))]
BAD_FORWARD = [("decorate", 3), ("cast_dtype", torch.int64), ("casts_on", ("cuda",)),
               ("extra_kwargs", {1: True}), ("decorate_backward", "custom_bwd")]


@pytest.mark.parametrize("field,value", BAD_REGION + BAD_FORWARD,
                         ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_REGION + BAD_FORWARD)])
def test_a_bad_field_is_one_error_naming_the_wrapper_and_the_field(field, value):
    decl = REGION if (field, value) in BAD_REGION else FORWARD
    with pytest.raises(DeclarationError) as info:
        validate(dataclasses.replace(decl, **{field: value}))
    assert info.value.field == field
    assert f"{field}:" in str(info.value)
    if field != "name":
        assert repr(decl.name) in str(info.value)


def test_fallback_needs_its_dtype_and_other_objects_are_refused():
    with pytest.raises(DeclarationError, match="fallback_dtype"):
        validate(dataclasses.replace(REGION, unknown="fallback"))
    with pytest.raises(DeclarationError, match="type: expected a RegionFactory"):
        validate(torch.autocast)
    assert validate(REGION) is REGION and validate(FORWARD) is FORWARD


# -- resolution: the option and the hook ---------------------------------------------------


def test_bad_declaration_through_the_option_is_a_usage_error(pytester):
    pytester.makepyfile(bad_decl="""
        import dataclasses
        from amp_conformance.checks.wrappers.planted import REFERENCE
        BAD = dataclasses.replace(REFERENCE[0], unknown="ignore")
        def make():
            return [REFERENCE[1], 42]
    """)
    pytester.syspathinsert()
    result = pytester.runpytest(*SUITE, "--wrapper", "bad_decl:BAD")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--wrapper bad_decl:BAD: wrapper 'torch.autocast': unknown: "
                                 "expected one of noop, error, fallback*"])
    result = pytester.runpytest(*SUITE, "--wrapper", "bad_decl:make")  # a zero-arg callable
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--wrapper bad_decl:make: wrapper '42'*type*"])
    for spec, words in (("bad_decl", "expected MODULE:NAME"), ("no_such_mod:X", "cannot load"),
                        ("bad_decl:MISSING", "cannot load")):
        result = pytester.runpytest(*SUITE, "--wrapper", spec)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--wrapper {spec}: {words}*"])


def test_a_wrapper_option_that_claims_another_device_is_a_usage_error(pytester):
    """A --wrapper whose declarations claim none of the run's device would run nothing in
    silence (with -k wrapper: pytest's bare "no tests ran"): it names their devices."""
    pytester.makepyfile(cuda_decl="""
        import dataclasses
        from amp_conformance.checks.wrappers.planted import REFERENCE
        ONLY_CUDA = [dataclasses.replace(REFERENCE[2], name="x.island", devices=("cuda",))]
    """)
    pytester.syspathinsert()
    result = pytester.runpytest(*SUITE, "--device", "cpu", "--wrapper", "cuda_decl:ONLY_CUDA",
                                "-k", "wrapper")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--wrapper cuda_decl:ONLY_CUDA: no wrapper it declares claims "
                                 "device 'cpu' (x.island: cuda): run with --device one of "
                                 "theirs (add --fake*"])


def test_a_name_declared_twice_is_a_usage_error(pytester):
    result = pytester.runpytest(*SUITE, "--wrapper", f"{PLANTED}:REFERENCE",
                                "--wrapper", f"{PLANTED}:REFERENCE")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*wrapper 'torch.autocast': name: declared twice*"])


def test_the_hook_declares_wrappers_and_a_bad_result_names_it(pytester):
    pytester.makeconftest(f"""
        from {PLANTED} import REFERENCE
        def pytest_amp_conformance_wrappers(config):
            return REFERENCE[0]
    """)
    result = pytester.runpytest(*SUITE, "--collect-only", "-q")
    ids = _ids(result.outlines)
    assert "test_wrapper_region[cpu-bfloat16-torch.autocast-bfloat16-state]" in ids
    assert not [i for i in ids if "custom_fwd" in i]
    pytester.makeconftest("""
        def pytest_amp_conformance_wrappers(config):
            return "mylib:REGION"
    """)
    result = pytester.runpytest(*SUITE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*hook pytest_amp_conformance_wrappers: gave str*expected a "
                                 "RegionFactory*"])


# -- the checks ----------------------------------------------------------------------------


def test_the_reference_wrappers_pass_every_check(pytester):
    result = pytester.runpytest(*SUITE, "--wrapper", f"{PLANTED}:REFERENCE", "-v", "-rs")
    result.assert_outcomes(passed=52, skipped=1)
    ids = _ids(result.outlines)
    for check in ("state", "restored", "nesting", "decorator", "cache", "policy", "nest",
                  "reuse", "threads", "cache_mix", "devices"):
        assert f"test_wrapper_region[cpu-float16-torch.autocast-float16-{check}]" in ids
    assert "test_wrapper_region[cpu-torch.autocast-unknown]" in ids
    for check in ("casts", "inside", "backward", "outside", "eligible", "after", "grad",
                  "devices"):
        assert f"test_wrapper_forward[cpu-torch.amp.custom_fwd-{check}]" in ids
    for check in ("float32", "restored", "nesting", "grad", "numerics", "devices"):
        for dtype in ("bfloat16", "float16"):
            assert f"test_wrapper_island[cpu-{dtype}-torch.autocast-disabled-{check}]" in ids
    for check in ("state", "restored", "nesting", "devices"):
        assert f"test_wrapper_runner[cpu-float16-torch.autocast-runner-float16-{check}]" in ids
    result.stdout.fnmatch_lines(["*not applicable: torch.amp.custom_fwd declares no extra "
                                 "keyword*"])


def _case(decl, check):
    return next(c for c in cases([decl], "cpu", (torch.bfloat16,)) if c.check == check)


PLANTED_BROKEN = [
    (planted.LEAKS_DTYPE, region.check_restored, "restored", failure.RESTORED_EXCEPTION,
     "dtype: torch.float16 before, torch.bfloat16 after"),
    (planted.NEVER_CLEARS_CACHE, region.check_cache, "cache", failure.CACHE, "still alive"),
    (planted.FIRST_ARG_ONLY, forward.check_casts, "casts", failure.CASTS,
     "keyword 'scale' sent as bfloat16 arrived as bfloat16, expected float32"),
    (planted.AUTOCAST_ON_INSIDE, forward.check_inside, "inside", failure.INSIDE,
     "enabled=True, dtype=bfloat16; expected enabled=False"),
    (planted.BACKWARD_OUTSIDE, forward.check_backward, "backward", failure.BACKWARD,
     "backward called inside torch.autocast(dtype=torch.float16) ran with (True, 'float16')"),
    (planted.SKIPS_WHEN_ON, nesting.check_nest, "nest", failure.NEST,
     "after decl.make('bfloat16', 'cpu') exited: enabled: True before, False after"),
    (planted.STALE, nesting.check_reuse, "reuse", failure.REUSE,
     "after the second entry: dtype: torch.float16 before, torch.bfloat16 after"),
    (planted.SHARED_STACK, nesting.check_threads, "threads", failure.THREADS,
     "the other thread, after its region (exited while this thread's was open): dtype"),
    (planted.CLEARS_EVERY_EXIT, nesting.check_cache_mix, "cache_mix", failure.CACHE_OUTERMOST,
     "the wrapper's region inside torch.autocast: the cached cast was released before"),
    (planted.NO_FINALLY_DECORATOR, region.check_decorator, "decorator",
     failure.DECORATOR_RAISES, "after the decorated function raised: enabled: False before"),
    (planted.CASTS_OUTSIDE, forward_contract.check_outside, "outside", failure.OUTSIDE,
     "positional 1 sent as bfloat16 arrived as float32, expected bfloat16"),
    (planted.TOP_LEVEL_ONLY, forward_contract.check_eligible, "eligible", failure.CONTAINERS,
     "positional 2[1]['inner'] sent as bfloat16 arrived as bfloat16, expected float32"),
    (planted.CASTS_FLOAT64, forward_contract.check_eligible, "eligible", failure.UNTOUCHED,
     "positional 3[0] sent as float64 arrived as float32, expected float64"),
    (planted.DISABLES_WITHOUT_FINALLY, forward_contract.check_after, "after", failure.AFTER,
     "after the forward raised: enabled: True before, False after"),
    (planted.DETACHES, forward_contract.check_grad, "grad", failure.GRAD,
     "does not require grad"),
]


@pytest.mark.parametrize("decl,check,name,promise,detail", PLANTED_BROKEN,
                         ids=[d.name for d, *_ in PLANTED_BROKEN])
def test_each_planted_wrapper_fails_naming_itself_and_its_promise(decl, check, name, promise,
                                                                 detail):
    before = AutocastState.capture("cpu")
    with pytest.raises(ConformanceFailure) as info:
        check(_case(decl, name))
    message = str(info.value)
    assert message.startswith(f"wrapper {decl.name} ")
    assert f"broken promise: {promise}" in message and detail in message
    assert "reproduce:" in message
    assert before.diff(AutocastState.capture("cpu")) == [], "the check restores the state"


def test_a_planted_wrapper_fails_its_suite_item(pytester):
    result = pytester.runpytest(*SUITE, "--wrapper", f"{PLANTED}:LEAKS_DTYPE", "-k", "restored")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"*wrapper planted.leaks_dtype*{failure.RESTORED_EXCEPTION}*"])


def test_the_mutants_plant_behind_the_sound_declaration_and_undo():
    names = [n for n in CATALOGUE if n.startswith("wrapper-")]
    assert len(names) == 57
    case = _case(planted.PLANTED[0], "restored")
    region.check_restored(case)  # sound: the selftest's baseline
    undo = CATALOGUE["wrapper-leaks-dtype-after-exception"].apply()
    try:
        with pytest.raises(ConformanceFailure, match="wrapper planted.region"):
            region.check_restored(case)
    finally:
        undo()
    region.check_restored(case)


def test_policy_spot_checks_enter_the_wrappers_region():
    case = _case(REGION, "policy")
    entered = []
    spy = dataclasses.replace(REGION, make=lambda p, d: entered.append(p) or REGION.make(p, d))
    checked = region.check_policy(dataclasses.replace(case, wrapper=spy), (), "bitwise")
    assert checked == ["mm", "mse_loss", "cat"]
    assert entered and set(entered) == {"bfloat16"}


def test_the_default_run_collects_no_wrapper_item(pytester):
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert not [line for line in result.outlines if "test_wrapper" in line]
    without = pytester.runpytest("--pyargs", "amp_conformance.suite", "--collect-only", "-q",
                                 "--ignore-glob=*test_wrappers.py")
    assert result.outlines[-1].split(" in ")[0] == without.outlines[-1].split(" in ")[0]


def test_a_wrapper_of_another_device_makes_no_item(pytester):
    pytester.makeconftest(f"""
        import dataclasses
        from {PLANTED} import REFERENCE
        def pytest_amp_conformance_wrappers(config):
            return dataclasses.replace(REFERENCE[0], devices=("cuda",))
    """)
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "--collect-only", "-q")
    assert not [line for line in result.outlines if "test_wrapper" in line]
    assert isinstance(_case(REGION, "state"), WrapperCase)


def test_the_report_has_a_wrappers_section(pytester):
    report = pytester.path / "report.json"
    pytester.runpytest(*SUITE, "--wrapper", f"{PLANTED}:REFERENCE", "--wrapper",
                       f"{PLANTED}:LEAKS_DTYPE", "--conformance-report", str(report))
    text = report.with_suffix(".md").read_text(encoding="utf-8")
    assert "### Wrappers" in text
    assert (f"| `planted.leaks_dtype` | region factory | torch {torch.__version__} | "
            f"cpu bfloat16, float16 | 21 | 3 | 0 | {failure.RESTORED_EXCEPTION}: "
            f"`bfloat16-restored`, `float16-restored`; {failure.DECORATOR_RAISES}: "
            "`float16-decorator` |") in text
    assert "| `torch.autocast` | region factory |" in text
    assert "| `torch.autocast-disabled` | float32 island |" in text
    assert 'id="wrappers"' in report.with_suffix(".html").read_text(encoding="utf-8")


def _ambient(precision, device):
    """torch.autocast with dtype=None for one name: the dtype already set when made."""
    if precision == "ambient":
        return torch.autocast(device)
    return planted.autocast_region(precision, device)


@pytest.mark.parametrize("check", [nesting.check_nest, nesting.check_threads,
                                   nesting.check_reuse, region.check_nesting,
                                   region.check_state])
def test_a_region_declared_ambient_takes_the_dtype_already_set(check):
    precisions = {"ambient": torch.bfloat16, "float16": torch.float16}
    decl = dataclasses.replace(REGION, name="ambient", make=_ambient, precisions=precisions,
                               ambient_dtype=("ambient",))
    case = next(c for c in cases([decl], "cpu", (torch.bfloat16,))
                if c.precision == "ambient" and c.check == "state")
    check(case)  # declared: passes
    if check not in (region.check_state, nesting.check_reuse):  # made where bfloat16 is set
        with pytest.raises(ConformanceFailure, match="dtype=float16; expected enabled=True, "
                           "dtype=bfloat16"):
            check(dataclasses.replace(case, wrapper=dataclasses.replace(decl, ambient_dtype=())))


def _generator_region(precision, device):
    import contextlib

    @contextlib.contextmanager
    def once():
        with planted.autocast_region(precision, device):
            yield
    return once()


def test_a_single_use_region_must_refuse_a_second_entry():
    decl = dataclasses.replace(REGION, name="generator", make=_generator_region)
    case = dataclasses.replace(_case(decl, "reuse"), precision="bfloat16")
    with pytest.raises(ConformanceFailure, match=f"{failure.REUSE}\n.*the second entry raised"):
        nesting.check_reuse(case)
    single = dataclasses.replace(decl, single_use="a @contextmanager generator")
    nesting.check_reuse(dataclasses.replace(case, wrapper=single))
    with pytest.raises(ConformanceFailure, match=failure.SINGLE_USE):
        nesting.check_reuse(dataclasses.replace(case, wrapper=dataclasses.replace(
            REGION, single_use="claimed, yet torch.autocast can be entered again")))


#: on a fake device: the region and runner bugs whose checks need no autograd
_FAKE_CAUGHT = ("restored", "nest", "reuse", "threads", "decorator")


@pytest.mark.parametrize("decl,check,name,promise,detail", [
    b for b in PLANTED_BROKEN if b[2] in _FAKE_CAUGHT and isinstance(b[0], RegionFactory)],
    ids=lambda v: getattr(v, "name", None))
def test_a_planted_region_is_caught_on_a_fake_cuda_device_too(decl, check, name, promise,
                                                            detail):
    """With CUDA made to look available in every check, a region factory's state checks
    run on a fake device as on a real one."""
    decl = dataclasses.replace(decl, devices=("cuda",))
    case = next(c for c in cases([decl], "cuda", (torch.bfloat16,), fake=True)
                if c.check == name and c.amp_dtype == torch.bfloat16)
    with pytest.raises(ConformanceFailure, match=re.escape(promise)), \
            fake_device.on_device(Target("cuda", True)):
        check(case)


def test_a_sound_wrapper_of_every_kind_passes_on_a_fake_cuda_device(pytester):
    """torch.autocast as a region and a runner, torch.amp.custom_fwd for CUDA, the disabled
    region as an island: every check passes or is skipped with why, none fails."""
    pytester.makepyfile(decl='''
        import dataclasses, torch
        from amp_conformance.checks.wrappers import ForwardDecorator, planted
        WRAPPERS = [dataclasses.replace(d, devices=("cuda",)) for d in planted.REFERENCE
                    if not isinstance(d, ForwardDecorator)] + [ForwardDecorator(
            name="custom_fwd.cuda", decorate=lambda fn: torch.amp.custom_fwd(
                fn, device_type="cuda", cast_inputs=torch.float32),
            cast_dtype=torch.float32, casts_on=("cuda",), devices=("cuda",))]
    ''')
    result = pytester.runpytest(*SUITE, "--device", "cuda", "--fake", "--wrapper",
                                "decl:WRAPPERS", "-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 30 and not outcomes.get("failed"), result.stdout.str()
    assert "enters the device's own autocast" not in result.stdout.str()


def test_a_fake_device_moves_small_constants_and_makes_views_contiguous():
    """A module's ``torch.tensor(0)`` buffer moved to the fake device (rotary-embedding-torch's
    ``dummy``) and ``.contiguous()`` of a permuted fake tensor (MONAI's quantizer) run there,
    as on the device."""
    with fake_device.on_device(Target("cuda", True)):
        moved = torch.tensor(0).to("cuda")
        x = torch.empty(2, 8, 4, 4, device="cuda").permute(0, 2, 3, 1).contiguous()
        assert (moved.device.type, moved.dtype) == ("cuda", torch.int64)
        assert x.is_contiguous() and x.view(-1, 8).shape == (32, 8)


def _autocast_in(precision, device):
    """A region factory passing a float32 name on to torch.autocast as its dtype."""
    return torch.autocast(device, dtype=getattr(torch, precision))


def test_a_float32_name_unclaimed_on_a_device_is_skipped_there_with_why():
    """torch.autocast refuses float32 on cpu (autocast off); on cuda it has no such check
    (torch/amp/autocast_mode.py), so a fake cuda device keeps autocast on in float32: a
    declaration that claims the no-op only where it was observed is skipped elsewhere."""
    why = "not yet observed on a GPU"
    decl = dataclasses.replace(REGION, name="dtype_from_name", make=_autocast_in,
                               devices=("cpu", "cuda"))
    unclaimed = dataclasses.replace(decl, float32_unclaimed={"cuda": why})
    validate(unclaimed)
    with pytest.warns(UserWarning, match="target dtype is not supported"):
        region.check_float32(next(c for c in cases([unclaimed], "cpu", (torch.bfloat16,))
                                  if c.check == "float32"))
    fake = next(c for c in cases([decl], "cuda", (torch.bfloat16,), fake=True)
                if c.check == "float32")
    with pytest.raises(ConformanceFailure, match="autocast is enabled \\(dtype float32\\)"), \
            fake_device.on_device(Target("cuda", True)):
        region.check_float32(fake)
    skipped = next(c for c in cases([unclaimed], "cuda", (torch.bfloat16,), fake=True)
                   if c.check == "float32")
    assert not_applicable(skipped, (torch.bfloat16,), True) == (
        "not applicable: dtype_from_name claims nothing for its float32 names on cuda "
        f"(declared float32_unclaimed): {why}")
    assert not_applicable(dataclasses.replace(skipped, device="cpu"), (torch.bfloat16,),
                          False) is None


@pytest.mark.parametrize("device", ["cuda", "xpu", "mps"])
def test_library_code_that_asks_the_device_runs_on_its_fake(device):
    """A training library's ``default_device()`` asks torch.accelerator, its logging the
    device module: on a fake device they answer as the one available accelerator, and are
    put back afterwards."""
    def default_device() -> torch.device:
        acc = torch.accelerator.current_accelerator()
        index = getattr(torch.accelerator, "current_device_index", None) \
            or torch.accelerator.current_device_idx  # torch 2.6's name
        return torch.device(acc.type, index())

    with fake_device.on_device(Target(device, True)):
        where = default_device()
        module = torch.get_device_module(where)
        module.synchronize()
        module.manual_seed(54321)  # a seed, not a device index
        torch.manual_seed(54321)  # which seeds every device module too
        x = torch.randn(4, 4, device=where)
        assert (where.type, torch.accelerator.device_count(), x.device.type) == (device, 1, device)
        if hasattr(module, "memory_allocated"):
            assert module.memory_allocated() == 0
        with torch.autocast(where.type, dtype=torch.bfloat16):
            assert (x @ x).dtype == torch.bfloat16
    assert not torch.accelerator.is_available()  # put back (2.6 raises asking for the current)


def test_a_forward_decorator_that_casts_nothing_declares_no_cast_dtype(pytester):
    """custom_fwd without cast_inputs: the forward runs in the caller's autocast state, its
    inputs as sent, and backward (custom_bwd) in the forward's state; declared with neither
    cast_dtype nor casts_on, every wrapper check of it passes. Half a cast is refused."""
    pytester.makepyfile(decl='''
        import torch
        from amp_conformance.checks.wrappers import ForwardDecorator
        WRAPPERS = [ForwardDecorator(
            name="custom_fwd.no_cast", devices=("cpu",),
            decorate=lambda fn: torch.amp.custom_fwd(fn, device_type="cpu"),
            disables_autocast=False,
            decorate_backward=lambda fn: torch.amp.custom_bwd(fn, device_type="cpu"))]
    ''')
    result = pytester.runpytest(*SUITE, "--wrapper", "decl:WRAPPERS", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 5 and not outcomes.get("failed"), result.stdout.str()
    half = ForwardDecorator(name="half", devices=("cpu",), decorate=lambda fn: fn,
                            cast_dtype=torch.float32)
    with pytest.raises(DeclarationError, match="casts_on: a decorator that casts names"):
        validate(half)


def test_a_decorators_backward_state_is_checked_on_a_fake_device():
    """custom_bwd's promise (backward in the forward's autocast state) needs no device
    tensors: on fake cuda host tensors carry the graph and cuda's autocast is as on the
    device; the planted decorator without it is caught, the sound one passes."""
    sound = ForwardDecorator(
        name="custom_fwd.cuda", devices=("cuda",), cast_dtype=torch.float32, casts_on=("cuda",),
        decorate=lambda fn: torch.amp.custom_fwd(fn, device_type="cuda",
                                                 cast_inputs=torch.float32),
        decorate_backward=lambda fn: torch.amp.custom_bwd(fn, device_type="cuda"))
    broken = dataclasses.replace(sound, decorate_backward=planted.no_backward_state)
    for decl, fails in ((sound, False), (broken, True)):
        case = next(c for c in cases([decl], "cuda", (torch.bfloat16,), fake=True)
                    if c.check == "backward")
        assert not_applicable(case, (torch.bfloat16,), True) is None
        with fake_device.on_host(Target("cuda", True)):
            if fails:
                with pytest.raises(ConformanceFailure, match=re.escape(failure.BACKWARD)):
                    forward.check_backward(case)
            else:
                forward.check_backward(case)
    assert not torch.is_autocast_enabled("cuda")
