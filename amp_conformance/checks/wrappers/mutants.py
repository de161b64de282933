"""Mutants of the wrapper tier: broken library wrappers planted behind the declarations
``planted.region`` and ``planted.forward`` (:mod:`amp_conformance.checks.wrappers.planted`).

Every mutant's run passes ``--wrapper amp_conformance.checks.wrappers.planted:PLANTED``; the
baseline of that group runs the planted wrappers sound (torch.autocast and
torch.amp.custom_fwd/custom_bwd), and each mutant's ``apply`` plants one broken
implementation behind the same declaration. Each must be killed with a message naming the
wrapper and the promise it breaks (``checks/wrappers/failure.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from amp_conformance.checks.mutation import Mutant, register
from amp_conformance.checks.wrappers import failure as F
from amp_conformance.checks.wrappers import planted
from amp_conformance.checks.wrappers import planted_islands as islands
from amp_conformance.checks.wrappers import planted_shapes as shapes

OPTIONS = ("--wrapper", "amp_conformance.checks.wrappers.planted:PLANTED")
REGION, FORWARD = "wrapper planted.region", "wrapper planted.forward"
ISLAND, ISLAND_FUNCTION = "wrapper planted.island ", "wrapper planted.island_function "
RUNNER = "wrapper planted.runner "

register(Mutant(
    name="wrapper-leaks-dtype-after-exception",
    description="a region factory whose region restores the enabled flag but not the dtype "
                "when the body raises",
    apply=lambda: planted.plant(make=planted.leaky_region),
    expect=(REGION, F.RESTORED_EXCEPTION),
    select="test_wrapper_region and restored",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-never-clears-cache",
    description="a region factory whose outermost exit never clears the cast cache",
    apply=lambda: planted.plant(make=planted.uncleared_region),
    expect=(REGION, F.CACHE),
    select="test_wrapper_region and cache",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-casts-first-argument-only",
    description="a forward decorator that casts its first argument and leaves the other "
                "floating inputs (positional and keyword) uncast",
    apply=lambda: planted.plant(decorate=planted.first_arg_only),
    expect=(FORWARD, F.CASTS, "positional 1"),
    select="test_wrapper_forward and casts",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-autocast-on-inside",
    description="a forward decorator that casts its inputs but leaves autocast enabled "
                "inside the forward (declared disables_autocast=True)",
    apply=lambda: planted.plant(decorate=planted.autocast_on_inside),
    expect=(FORWARD, F.INSIDE),
    select="test_wrapper_forward and inside",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-backward-outside-forward-state",
    description="a forward decorator whose decorate_backward does nothing: backward runs "
                "in whatever state it is called in, not the forward's",
    apply=lambda: planted.plant(decorate_backward=planted.no_backward_state),
    expect=(FORWARD, F.BACKWARD),
    select="test_wrapper_forward and backward",
    options=OPTIONS,
))

register(Mutant(
    name="wrapper-backward-outside-forward-state-fake-cuda",
    description="a CUDA forward decorator whose decorate_backward does nothing (on a fake "
                "cuda device: its backward state checked with host tensors carrying the graph)",
    apply=lambda: planted.plant(decorate_backward_cuda=planted.no_backward_state),
    expect=("wrapper planted.forward_cuda", F.BACKWARD),
    select="test_wrapper_forward and backward",
    options=OPTIONS, device="cuda", fake=True,
))

# issue 26: the whole custom_fwd contract, every nesting and reuse of a region
_NEW = [
    ("wrapper-region-skips-when-on", REGION, F.NEST, "nest", planted.skips_when_on,
     "a region that enters nothing when autocast is already on in its dtype but turns it "
     "off on exit: nested inside itself, the outer region loses autocast"),
    ("wrapper-region-stale-on-reuse", REGION, F.REUSE, "reuse", planted.stale_region,
     "a region object that saves the state to restore when made, not when entered"),
    ("wrapper-region-shared-stack", REGION, F.THREADS, "threads", planted.shared_stack_region,
     "a region whose saved states live on one process-wide stack: overlapping regions of "
     "two threads restore each other's state"),
    ("wrapper-region-clears-every-exit", REGION, F.CACHE_OUTERMOST, "cache_mix",
     planted.clears_every_exit, "a region that clears the cast cache at every exit, "
     "inner ones included"),
    ("wrapper-region-decorator-no-finally", REGION, F.DECORATOR_RAISES, "decorator",
     planted.no_finally_decorator, "a decorator form that restores the state only when the "
     "function returns"),
    ("wrapper-forward-casts-outside", FORWARD, F.OUTSIDE, "outside", planted.casts_outside,
     "a forward decorator that casts and disables autocast outside any region too"),
    ("wrapper-forward-top-level-only", FORWARD, F.CONTAINERS, "eligible",
     planted.top_level_only, "a forward decorator that leaves tensors inside lists, tuples "
     "and dicts uncast"),
    ("wrapper-forward-casts-float64", FORWARD, F.UNTOUCHED, "eligible", planted.casts_float64,
     "a forward decorator that casts float64 tensors too"),
    ("wrapper-forward-disabled-after-raise", FORWARD, F.AFTER, "after",
     planted.disables_without_finally, "a forward decorator that turns autocast off by hand "
     "and back on only when the forward returns"),
    ("wrapper-forward-detaches", FORWARD, F.GRAD, "grad", planted.detaches,
     "a forward decorator whose casts are detached: no gradient reaches the inputs"),
]
for _name, _who, _promise, _check, _impl, _what in _NEW:
    _slot = "make" if _who == REGION else "decorate"
    register(Mutant(
        name=_name,
        description=_what,
        apply=lambda slot=_slot, impl=_impl: planted.plant(**{slot: impl}),
        expect=(_who, _promise),
        select=f"test_wrapper_{'region' if _who == REGION else 'forward'} and {_check}",
        options=OPTIONS,
    ))


# issue 38: float32 islands, and every wrapper on its own device's state alone
register(Mutant(
    name="wrapper-region-reads-cuda-flag",
    description="a region factory that enters nothing where autocast is already on, asking "
                "CUDA's flag (torch.is_autocast_enabled() without a device) on cpu",
    apply=lambda: planted.plant(make=planted.nests_by_cuda_flag),
    expect=(REGION, F.READS_OTHER, "it reads cuda's state"),
    select="test_wrapper_region and devices",
    options=OPTIONS,
))
_ISLANDS = [
    ("wrapper-island-no-restore", "no_restore", F.ISLAND_RESTORED, "restored", "enabled",
     "a float32 island that turns autocast off and never turns it back on"),
    ("wrapper-island-leaves-cache-on", "cache_on", F.ISLAND_RESTORED, "restored",
     "cache_enabled", "a float32 island that turns the cast cache on and leaves it on"),
    ("wrapper-island-reads-other-device", "reads_other", F.READS_OTHER, "devices",
     "it reads {other}'s state", "a float32 island that asks another device's flag "
     "(CUDA's on cpu, CPU's elsewhere) whether to turn autocast off"),
]
for _name, _bug, _promise, _check, _text, _what in _ISLANDS:
    for _device, _fake in (("cpu", False), ("cuda", True)):
        register(Mutant(
            name=_name + ("-fake-cuda" if _fake else ""),
            description=_what + (" (on a fake cuda device)" if _fake else ""),
            apply=lambda bug=_bug: planted.plant(island=planted.island_of(bug)),
            expect=(ISLAND, _promise, _text.format(other="cpu" if _fake else "cuda")),
            select=f"test_wrapper_island and {_check}",
            options=OPTIONS, device=_device, fake=_fake,
        ))
for _device, _fake in (("cpu", False), ("cuda", True)):
    register(Mutant(
        name="wrapper-island-leaves-through-other-device" + ("-fake-cuda" if _fake else ""),
        description="a float32 island whose first call comes before it leaves autocast, and "
                    "which then switches another device's autocast off too"
                    + (" (on a fake cuda device)" if _fake else ""),
        apply=lambda: planted.plant(island_function=planted.leaves_through_other),
        expect=(ISLAND_FUNCTION, F.CHANGES_OTHER,
                f"it changed {'cpu' if _fake else 'cuda'}'s autocast state"),
        select="test_wrapper_island and devices",
        options=OPTIONS, device=_device, fake=_fake,
    ))
register(Mutant(
    name="wrapper-island-enters-region-fake-cuda",
    description="a float32 island that enters its device's bfloat16 autocast where it meant "
                "to leave it, on a fake cuda device (where torch.autocast('cuda') would "
                "disable itself unless CUDA looks available)",
    apply=lambda: planted.plant(island_function=planted.enters_region),
    expect=(ISLAND_FUNCTION, F.ISLAND_FLOAT32, "computed in bfloat16"),
    select="test_wrapper_island and float32",
    options=OPTIONS, device="cuda", fake=True,
))
register(Mutant(
    name="wrapper-island-cuts-its-graph-in-a-region",
    description="a float32 island whose fast path for the region's lower-precision "
                "activations detaches its result: no gradient reaches its inputs there",
    apply=lambda: planted.plant(island_function=planted.cuts_lower_precision),
    expect=(ISLAND_FUNCTION, F.ISLAND_GRAD, "inside a region no output depends"),
    select="test_wrapper_island and grad",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-island-casts-back-wrong",
    description="a float32 island declared to return its input's dtype that casts its "
                "result to float16 whatever the input",
    apply=lambda: planted.plant(island_function=planted.back_to_float16),
    expect=(ISLAND_FUNCTION, F.ISLAND_RETURNS, "declared returns='input'"),
    select="test_wrapper_island and float32",
    options=OPTIONS,
))
register(Mutant(
    name="wrapper-runner-enters-cuda-region",
    description="a region runner (a trainer's step) that enters CUDA's autocast whatever "
                "its tensors' device: on cpu the model runs with autocast off",
    apply=lambda: planted.plant(runs=planted.run_in_cuda_region),
    expect=(RUNNER, F.RUNS_STATE, "enabled=False"),
    select="test_wrapper_runner and state",
    options=OPTIONS,
))


# issue 48: region swaps, predicates and scalers
SWAP, PREDICATE, SCALER = "wrapper planted.swap ", "wrapper planted.predicate ", \
    "wrapper planted.scaler "
_TIERS = (("cpu", False), ("cuda", True))
_SHAPES = [
    ("wrapper-swap-no-restore-on-error", SWAP, "swap", shapes.swap_of("no_restore_on_error"),
     F.SWAP_RESTORED, "restored", "after an exception inside it: dtype",
     "a region swap that gives the region's dtype back only when its body returns"),
    ("wrapper-swap-reads-other-device", SWAP, "swap", shapes.swap_of("reads_other"),
     F.READS_OTHER, "devices", "it reads {other}'s state", "a region swap that asks another "
     "device's flag (CUDA's on cpu, CPU's elsewhere) whether a region is on"),
    ("wrapper-swap-enters-outside", SWAP, "swap", shapes.swap_of("enters"), F.SWAP_OUTSIDE,
     "outside", "expected autocast off", "a region swap that is torch.autocast(device, "
     "dtype=bfloat16): outside any region it turns autocast on"),
    ("wrapper-predicate-reads-other-device", PREDICATE, "predicate", shapes.reads_other,
     F.PREDICATE, "state", "inside the region: answered False", "a predicate that reads "
     "another device's flag (torch.is_autocast_enabled() without a device for CPU tensors)"),
    ("wrapper-predicate-float16-only", PREDICATE, "predicate", shapes.float16_only,
     F.PREDICATE, "state and bfloat16", "inside the region: answered False",
     "a predicate that answers whether float16 autocast is on: no in a bfloat16 region"),
    ("wrapper-predicate-cached", PREDICATE, "predicate", None, F.PREDICATE, "state",
     "inside the region: answered False", "a predicate that remembers its first answer "
     "per device type"),
    ("wrapper-scaler-scales-in-half", SCALER, "scaler", "scales_in_half", F.SCALES, "scales",
     "backward received a float16 tensor", "a scaler helper that backpropagates the scaled "
     "loss cast to float16 (it overflows at the default scale)"),
    ("wrapper-scaler-unscaled-backward", SCALER, "scaler", "unscaled_backward", F.SCALES,
     "scales", "backward received the loss itself", "a scaler helper that backpropagates "
     "the plain loss when it does not clip"),
]


def _planting(kind: str, impl: object) -> Callable[[], Callable[[], None]]:
    """The apply of a shape's mutant: a helper's bug, a fresh cached predicate, or ``impl``."""
    if kind == "scaler":
        return lambda: shapes.plant_helper(str(impl))
    if impl is None:
        return lambda: shapes.plant(predicate=shapes.cached())
    return lambda: shapes.plant(**{kind: impl})


for _name, _who, _kind, _impl, _promise, _check, _text, _what in _SHAPES:
    for _device, _fake in _TIERS:
        _apply = _planting(_kind, _impl)
        register(Mutant(
            name=_name + ("-fake-cuda" if _fake else ""),
            description=_what + (" (on a fake cuda device)" if _fake else ""),
            apply=_apply,
            expect=(_who, _promise, _text.format(other="cpu" if _fake else "cuda")),
            select=f"test_wrapper_{_kind} and {_check}",
            options=OPTIONS, device=_device, fake=_fake,
        ))
# the scaler's value checks need autograd: on cpu only (a fake device skips them with why)
for _name, _bug, _promise, _check, _text, _what in [
    ("wrapper-scaler-never-skips", "never_skips", F.SKIPS, "skips", "must be skipped",
     "a scaler helper that steps the optimizer itself, skipping no step"),
    ("wrapper-scaler-unscales-twice", "unscales_twice", F.UNSCALE_ONCE, "unscale",
     "differs from the unscaled control", "a scaler helper that unscales by hand before "
     "clipping, and GradScaler.step unscales again"),
    ("wrapper-scaler-load-ignored", "no_load", F.ROUND_TRIP, "state_dict",
     "a fresh scaler's state_dict()", "a scaler helper whose load_state_dict does nothing "
     "(as timm's ApexScaler where apex has none)"),
]:
    register(Mutant(
        name=_name, description=_what,
        apply=lambda bug=_bug: shapes.plant_helper(bug),
        expect=(SCALER, _promise, _text),
        select=f"test_wrapper_scaler and {_check}",
        options=OPTIONS,
    ))


# issue 57: the island shapes library code has, and a runner that leaves its region open
_PARTS = [
    ("wrapper-island-region-core-in-region", "island_region", islands.cholesky_in_region,
     F.ISLAND_FLOAT32, "float32", "before its float32 core ended",
     "an island declared ending='region' whose core's product runs in the caller's region "
     "(autocast never left)"),
    ("wrapper-island-region-ending-own-dtype", "island_region", islands.ending_in_bfloat16,
     F.ISLAND_NESTING, "nesting", "after its float32 core",
     "an island declared ending='region' whose part after the core runs in a bfloat16 "
     "region of its own, whatever the caller's region"),
    ("wrapper-island-before-in-region", "island_before", islands.projected_in_region,
     F.ISLAND_FLOAT32, "float32", "before its float32 core",
     "an island declared before='input' whose work before the core is a projection the "
     "caller's region runs in its own dtype"),
    ("wrapper-island-argument-cast-down", "island_arguments", islands.scale_cast_down,
     F.ISLAND_FLOAT32, "float32", "aten.mul.Tensor computed in",
     "an island declared to take a float32 argument (arguments=(None, torch.float32)) "
     "that casts it down to its activation's dtype and multiplies there"),
]
for _name, _slot, _impl, _promise, _check, _text, _what in _PARTS:
    for _device, _fake in _TIERS:
        register(Mutant(
            name=_name + ("-fake-cuda" if _fake else ""),
            description=_what + (" (on a fake cuda device)" if _fake else ""),
            apply=lambda slot=_slot, impl=_impl: islands.plant(**{slot: impl}),
            expect=(f"wrapper planted.{_slot} ", _promise, _text),
            select=f"test_wrapper_island and {_check}",
            options=OPTIONS, device=_device, fake=_fake,
        ))
register(Mutant(
    name="wrapper-runner-open-on-raise",
    description="a region runner in the manner of a training loop's callbacks: the region "
                "entered before the forward and left after it, with no finally: when the "
                "forward raises, the region stays open",
    apply=lambda: planted.plant(runs=islands.leaves_open_on_raise),
    expect=(RUNNER, F.RESTORED, "after the body raised"),
    select="test_wrapper_runner and restored",
    options=OPTIONS,
))
