"""The compile checks catch broken compile paths, and the --amp-compile tier's plumbing.

The region scenarios and the per-entry check run in-process against the selftest's
mutants (dynamo patched to trace the wrong dtype, to drop its autocast guard, to leak
state when a resumed region raises; a backend that drops the regions); the option,
its alias, the opt-in item generation and the vendor capability run through pytester.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import sympy  # noqa: F401  (see below)
import torch

from amp_conformance.checks import compiling as backends
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.compile_regions import bodies, caches, export, regions
from amp_conformance.checks.compile_regions import mutants as mutants_compile
from amp_conformance.checks.compiled_policy import per_entry
from amp_conformance.checks.registry import mutants
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.state import AutocastState
from amp_conformance.core.target import Target
from amp_conformance.schema.defects import registry as defect_registry

CATALOGUE = mutants()

# sympy is imported here, at collection: torch imports it lazily (dynamo), and pytester's
# in-process runs drop every module imported during a run but torch's (tests/conftest.py),
# so a sympy first imported inside one would be imported again after it, and the torch
# modules kept would meet a second sympy ("Can only compare inequalities with Expr").
CPU = Target("cpu")

SUITE = ("--pyargs", "amp_conformance.suite.test_compile")
ID = re.compile(r"(test_\w+\[[^\]]+\])")


def _ids(lines):
    return sorted({m.group(1) for line in lines for m in [ID.search(line)] if m})


def _mutated(name):
    """Apply a compile mutant of the selftest catalogue for the duration of a with-block."""
    class _Ctx:
        def __enter__(self):
            self.undo = CATALOGUE[name].apply()

        def __exit__(self, *exc):
            self.undo()
            torch._dynamo.reset()
    return _Ctx()


def _mm_case(dtype=torch.bfloat16, backend="aot_eager"):
    (entry,) = [e for e in load_oplist("cpu").entries if e.id == "mm"]
    return per_entry.CompiledCase.of(Case(CPU, dtype, entry), backend)


# -- the scenario table --------------------------------------------------------------


def test_scenario_table_is_well_formed():
    names = [s.name for s in regions.SCENARIOS]
    assert len(names) == len(set(names))
    for s in regions.SCENARIOS:
        assert s.exercises and s.calls and s.graphs[0] <= s.graphs[1], s.name
        assert s.needs <= {"inner", "other", "legacy"}, s.name
        assert all(k[0] in (*backends.BITWISE, "inductor", "*")
                   or k[0] in {regions.EXPORT + m for m in export.MODES} for k in s.known)
        # each known defect is recorded, saying where it was seen
        assert all(k[1] in defect_registry() and "seen on" in defect_registry()[k[1]].summary
                   for k in s.known), s.name


def test_not_applicable_reasons():
    inner = regions.by_name("inner_region")
    fake = Target("cuda", True)
    assert "not applicable in --fake mode" in regions.not_applicable(
        inner, fake, torch.float16, "aot_eager")
    assert regions.not_applicable(regions.by_name("outer_region"), fake, torch.float16,
                                  "aot_eager") is None
    assert "generates code" in regions.not_applicable(
        regions.by_name("outer_region"), fake, torch.float16, "inductor")


@pytest.mark.parametrize("backend", backends.BITWISE)
def test_conforming_scenarios_pass(backend):
    for name in ("inner_region", "disabled_subregion", "graph_break"):
        regions.check(regions.by_name(name), CPU, torch.bfloat16, backend)


def test_a_break_that_runs_no_op_misses_a_region_lost_at_the_break():
    """Why the computing scenarios exist: torch._dynamo.graph_break() runs nothing there."""
    with _mutated("compile-break-runs-without-region"):
        regions.check(regions.by_name("graph_break"), CPU, torch.float16, "eager")


@pytest.mark.parametrize("mutant, scenario, text", [
    ("compile-region-other-dtype", "inner_region", "attribute 'dtype' do not match"),
    ("compile-region-traced-disabled", "inner_region", "attribute 'dtype' do not match"),
    ("compile-stale-guard", "ambient_changes", "inside an other-dtype region"),
    ("compile-region-leaks-on-raise", "error_at_graph_break",
     "autocast state not restored after the compiled region raised"),
    ("compile-legacy-positional-ignored", "call_forms", "['legacy-positional with, enabled="),
    ("compile-break-runs-without-region", "computing_break", "torch.float32 != torch.float16"),
    ("compile-decorated-call-breaks-graph", "decorated_calls", "compiled call raised Unsupported"),
    ("compile-legacy-context-breaks-graph", "legacy_entry_point",
     "compiled call raised Unsupported"),
    ("compile-legacy-context-breaks-graph", "call_forms", "compiled call raised Unsupported"),
    ("compile-cache-key-ignores-autocast-dtype", "recompiled_in_other_region",
     "inside an other-dtype region"),
])
def test_region_check_catches_broken_compile_path(mutant, scenario, text):
    before = AutocastState.capture("cpu")
    with _mutated(mutant), pytest.raises(ConformanceFailure) as caught:
        regions.check(regions.by_name(scenario), CPU, torch.float16, "aot_eager")
    message = str(caught.value)
    assert f"compile_regions scenario {scenario!r}" in message
    assert "backend aot_eager" in message and "torch.float16" in message
    assert text in message
    assert before.diff(AutocastState.capture("cpu")) == []  # the check restored the state


def test_a_graph_break_at_a_region_is_seen_only_with_fullgraph():
    """Why the scenarios without a break by design compile with fullgraph=True: a legacy
    context that breaks the graph leaves the dtypes right and one graph compiled."""
    lenient = dataclasses.replace(regions.by_name("legacy_entry_point"), fullgraph=False)
    with _mutated("compile-legacy-context-breaks-graph"):
        regions.check(lenient, CPU, torch.bfloat16, "eager")


def test_only_the_scenarios_that_break_on_purpose_compile_without_fullgraph():
    lenient = {s.name for s in regions.SCENARIOS if not s.fullgraph}
    assert lenient == {"graph_break", "computing_break", "computing_break_nested",
                       "computing_break_disabled", "computing_break_decorator",
                       "error_at_graph_break"}
    assert all(s.graphs[0] >= 2 or s.raises for s in regions.SCENARIOS if not s.fullgraph)


def test_decorated_calls_cover_every_decorated_callable():
    body = bodies.decorated_calls(bodies.Env(CPU, torch.bfloat16, torch.float16))
    out = body(torch.ones(2, 2))
    assert sorted(out) == sorted([
        "function", "method", "staticmethod", "module forward", "callable object",
        "legacy decorator", "enabled=False function, called in a region",
        "other-dtype function, called in a region", "the region after them"])
    dtypes = {name: value[0].dtype for name, value in out.items()}
    assert dtypes["enabled=False function, called in a region"] == torch.float32
    assert dtypes["other-dtype function, called in a region"] == torch.float16
    assert {dtypes[n] for n in dtypes if "called in a region" not in n} == {torch.bfloat16}


def test_known_eager_backend_leak_is_seen():
    """pytorch/pytorch#195488 on torch 2.13: the suite marks it a strict xfail, so the
    check must really fail (and say what leaked)."""
    scenario = regions.by_name("kernel_error")
    assert "195488" in scenario.known_defect("eager")
    assert scenario.known_defect("aot_eager") is None
    with pytest.raises(ConformanceFailure, match="nesting: 0 before, 1 after"):
        regions.check(scenario, CPU, torch.float16, "eager")


def test_compiling_bounds_and_counts_graphs():
    with backends.compiling() as stats:
        torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
        assert stats.graphs == 1
    assert stats.graphs == 1


def test_compiling_leaves_out_dynamos_guard_timing_and_only_there():
    import torch._dynamo.guards as guards

    timed = guards.profile_guard_manager
    with backends.compiling() as stats:
        assert guards.profile_guard_manager is not timed  # the guards are built, not timed
        compiled = torch.compile(lambda x: x * 2, backend="eager")
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))
        compiled(torch.ones(2, dtype=torch.float64))  # the guards still hold: a recompile
        assert stats.graphs == 2
    assert guards.profile_guard_manager is timed


# -- the per-entry tier --------------------------------------------------------------


def test_compiled_case_id_and_numerics():
    assert _mm_case(backend="inductor").id == "cpu-bfloat16-inductor-torch_16-mm"
    assert _mm_case(backend="inductor").numerics == "close"
    assert _mm_case(backend="aot_eager").numerics == "bitwise"
    assert per_entry.not_applicable(_mm_case(backend=None)) == per_entry.NOT_GIVEN


def test_compiled_policy_passes_and_catches_dropped_regions():
    per_entry.check_compiled_policy(_mm_case())
    with _mutated("compile-backend-drops-regions"), pytest.raises(ConformanceFailure) as caught:
        per_entry.check_compiled_policy(_mm_case())
    message = str(caught.value)
    assert message.startswith("compiled_policy: torch.mm [entry mm")
    assert "compiled output dtypes [torch.float32], eager gave [torch.bfloat16]" in message
    assert "torch.compile(body, backend='aot_eager', fullgraph=True)" in message


def test_mutants_of_the_compile_tier_are_registered():
    mine = {n for n, m in CATALOGUE.items() if m.apply.__module__ == mutants_compile.__name__}
    assert mine == {"compile-region-other-dtype", "compile-region-traced-disabled",
                    "compile-region-leaks-on-raise", "compile-stale-guard",
                    "compile-backend-drops-regions", "compile-legacy-positional-ignored",
                    "compile-break-runs-without-region", "export-region-error-swallowed",
                    "export-strict-region-error-swallowed", "compile-decorated-call-breaks-graph",
                    "compile-legacy-context-breaks-graph",
                    "compile-cache-key-ignores-autocast-dtype",
                    "export-non-strict-drops-regions"}


# -- torch.export ----------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_the_export_of_a_raising_region_passes_and_records_each_modes_defect(strict):
    known = strict or defect_registry()[export.NON_STRICT_DEFECT].applies()  # strict: unfixed
    assert export.check_export_raises(CPU, torch.bfloat16, torch.float16, strict) is known


def test_an_exception_lost_in_an_exported_region_is_caught():
    before = AutocastState.capture("cpu")
    with _mutated("export-region-error-swallowed"), pytest.raises(ConformanceFailure) as caught:
        export.check_export_raises(CPU, torch.bfloat16, torch.float16, strict=False)
    assert "the export raised RuntimeError: autocast region could not be exported" in str(
        caught.value)
    assert before.diff(AutocastState.capture("cpu")) == []


def test_an_exception_lost_in_a_strict_export_is_caught_where_the_defect_is_accepted():
    """Strict export's known defect (dynamo's "Observed exception", which names the
    module's exception) is accepted; an error that does not name it is not."""
    with _mutated("export-strict-region-error-swallowed"), \
            pytest.raises(ConformanceFailure) as caught:
        export.check_export_raises(CPU, torch.bfloat16, torch.float16, strict=True)
    assert "the export raised RuntimeError: autocast region could not be traced" in str(
        caught.value)


def test_export_finds_regions_and_catches_a_lost_one(monkeypatch):
    export.check_export(CPU, torch.bfloat16, torch.float16)
    module = export.Regions("cpu", torch.bfloat16, None)
    program = torch.export.export(module, (torch.ones(8, 8),))
    assert export.regions_in(program.graph_module) == module.expected_regions()
    monkeypatch.setattr(export.Regions, "expected_regions",
                        lambda self: [("cpu", torch.bfloat16, True)] * 3)
    with pytest.raises(ConformanceFailure, match="the exported graph holds the regions"):
        export.check_export(CPU, torch.bfloat16, None)


# -- options, items, capability (pytester) ---------------------------------------------


def test_unknown_backend_is_a_usage_error_naming_the_allowed(pytester):
    result = pytester.runpytest(*SUITE, "--amp-compile", "nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--amp-compile 'nosuch'*allowed: aot_eager*eager*inductor*"])


def test_tier_is_opt_in_and_named_by_backend(pytester):
    default = pytester.runpytest(*SUITE, "--collect-only", "-q")
    ids = _ids(default.outlines)
    assert not [i for i in ids if i.startswith("test_compiled_policy")]
    assert "test_compile_region[cpu-bfloat16-aot_eager-inner_region]" in ids
    assert "test_export_keeps_regions[cpu-float16]" in ids
    opted = pytester.runpytest(*SUITE, "--compile", "aot_eager", "--collect-only", "-q")
    opted_ids = _ids(opted.outlines)
    assert "test_compiled_policy[cpu-bfloat16-aot_eager-torch_16-mm]" in opted_ids
    assert set(ids) <= set(opted_ids)


def test_host_keeps_its_own_compile_option(pytester):
    pytester.makeconftest("""
        def pytest_addoption(parser):
            parser.addoption("--compile", action="store_true")
    """)
    result = pytester.runpytest(*SUITE, "--compile", "--amp-compile", "eager", "-q",
                                "-k", "compiled_policy and torch_16-mm and bfloat16")
    result.assert_outcomes(passed=1)


def test_device_without_compile_support_skips_the_family(pytester, tmp_path):
    caps = tmp_path / "caps.toml"
    caps.write_text("[capabilities]\ncompile = false\n[reasons]\ncompile = \"no dynamo\"\n")
    result = pytester.runpytest(*SUITE, f"--capabilities={caps}", "-rs", "-k",
                                "export or (inner_region] and eager)")
    # per dtype: export keeps regions, region raises (x2); per mode: the default scenarios
    result.assert_outcomes(skipped=10 + 2 * len(export.DEFAULT_SCENARIOS))
    result.stdout.fnmatch_lines(["*device declares no torch.compile support (no dynamo)*"])


@pytest.mark.parametrize("mode", list(export.MODES))
def test_the_default_scenarios_export_as_eager_or_show_a_recorded_defect(mode):
    recorded = {export.CACHE_DEFECT, export.DECOMPOSITION_DEFECT}
    for name in export.DEFAULT_SCENARIOS:
        before = AutocastState.capture("cpu")
        shown = export.check_scenario_export(regions.by_name(name), CPU, torch.bfloat16, mode)
        assert set(shown) <= recorded, name
        assert not before.diff(AutocastState.capture("cpu"))
    # the decomposition, called inside a region, loses the enabled=False region it held
    assert export.DECOMPOSITION_DEFECT in export.check_scenario_export(
        regions.by_name("disabled_region_under_ambient"), CPU, torch.bfloat16, mode)


def test_a_region_lost_in_one_export_mode_is_caught_there_only():
    inner = regions.by_name("inner_region")
    with _mutated("export-non-strict-drops-regions"):
        with pytest.raises(ConformanceFailure, match="the exported program vs eager"):
            export.check_scenario_export(inner, CPU, torch.bfloat16, "non_strict")
        export.check_scenario_export(inner, CPU, torch.bfloat16, "strict")


def test_a_defect_every_compile_backend_shows_is_not_an_exports():
    stale = regions.by_name("dtype_change_while_disabled")
    assert stale.known_defect("eager", "2.13.0") is not None
    assert stale.known_defect(regions.EXPORT + "strict", "2.13.0") is None
    swallowed = regions.by_name("error_at_graph_break")
    assert swallowed.known_defect(regions.EXPORT + "non_strict", "2.8.0") is not None
    assert swallowed.known_defect(regions.EXPORT + "non_strict", "2.9.0") is None
    assert swallowed.known_defect("eager", "2.8.0") is None


def test_a_known_defect_fixed_since_applies_before_its_release_only():
    ambient = regions.by_name("ambient_changes")
    assert "dynamo's guards miss" in ambient.known_defect("eager", "2.6.0")
    assert "compile-stale-ambient-dtype" in ambient.known_defect("eager", "2.6.0")
    assert ambient.known_defect("aot_eager", "2.6.0") is not None
    assert ambient.known_defect("eager", "2.7.1") is None
    assert ambient.known_defect("eager", "2.13.0") is None


# -- PyTorch's own defects in the compiled tier -----------------------------------------


def _case_of(device, entry_id, dtype=torch.bfloat16, backend="aot_eager", fake=False, **edit):
    import dataclasses

    (entry,) = [e for e in load_oplist(device).entries if e.id == entry_id]
    entry = dataclasses.replace(entry, **edit)
    return per_entry.CompiledCase.of(Case(Target(device, fake), dtype, entry), backend)


def _recorded(case):
    got = []
    per_entry.check_compiled_policy(case, lambda key, value: got.append((key, value)))
    return got


def test_eager_defect_error_compiled_raises_it_too_and_is_recorded():
    """cat of float16 beside bfloat16: eager raises prioritize's error (the entry's
    reference defect), so does the compiled call (inside dynamo's TorchRuntimeError)."""
    case = _case_of("cpu", "cat-mixed-lower-precision")
    ((key, value),) = _recorded(case)
    assert key == "amp_defect" and value["status"] == "reproduced"
    assert value["id"] == "prioritize-mixed-lower-precision"


def test_eager_defect_error_compiled_as_intended_fixes_it(monkeypatch):
    """Where eager raises the defect's error, a compiled call that runs must give the
    contract's dtypes (float32, the widest input type): then it fixes the defect; any
    other dtype fails."""
    case = _case_of("cpu", "cat-mixed-lower-precision")
    args, _ = case.build_inputs()
    for dtype in (torch.float32, torch.bfloat16):
        monkeypatch.setattr(per_entry, "_compiled_call",
                            lambda case, body, d=dtype: (torch.cat(args[0]).to(d), None, 1))
        if dtype == torch.float32:
            ((_, value),) = _recorded(case)
            assert value["status"] == "fixed"
        else:
            with pytest.raises(ConformanceFailure, match="compiled ran, not as the contract "
                                                         "intends.*expected torch.float32"):
                per_entry.check_compiled_policy(case)


def test_an_error_other_than_the_defects_fails():
    import dataclasses

    case = _case_of("cpu", "cat-mixed-lower-precision")
    use = dataclasses.replace(case.entry.reference_defect, error="some other message")
    case = dataclasses.replace(case, entry=dataclasses.replace(case.entry, reference_defect=use))
    with pytest.raises(ConformanceFailure, match="eager .not compiled. raised RuntimeError: "
                                                 "Unexpected floating ScalarType"):
        per_entry.check_compiled_policy(case)


@pytest.mark.parametrize("absent_device", [("cuda", "xpu", "mtia")], indirect=True)
def test_compiled_defect_reproduced_only_where_recorded(absent_device):
    """upsample_nearest1d.vec compiled with aot_eager skips AutocastCUDA's fp32 kernel
    (its Python decomposition): the entry's compiled_defect accepts the amp dtype and the
    item records it; without it, or with another dtype recorded, the check fails; with a
    backend it was not seen with (eager), compiled must agree with eager, and does."""
    import dataclasses

    case = _case_of(absent_device, "upsample_nearest1d", torch.float16, fake=True)
    ((_, value),) = _recorded(case)
    assert (value["id"], value["status"]) == ("compile-upsample-vec-skips-autocast", "reproduced")
    with pytest.raises(ConformanceFailure, match=r"compiled output dtypes \[torch.float16\], "
                                                 r"eager gave \[torch.float32\]\n"):
        per_entry.check_compiled_policy(dataclasses.replace(
            case, entry=dataclasses.replace(case.entry, compiled_defect=None)))
    other = dataclasses.replace(case.entry.compiled_defect, expect="bfloat16")
    with pytest.raises(ConformanceFailure, match="nor is it what PyTorch's compiled call gives "
                                                 "today.*expected torch.bfloat16"):
        per_entry.check_compiled_policy(dataclasses.replace(
            case, entry=dataclasses.replace(case.entry, compiled_defect=other)))
    assert _recorded(_case_of(absent_device, "upsample_nearest1d", torch.float16,
                              backend="eager", fake=True)) == []


@pytest.mark.parametrize("absent_device", [("mps",)], indirect=True)
@pytest.mark.parametrize("entry_id", ["tensordot", "conv_transpose3d"])
def test_aot_runtime_ignoring_mps_autocast_is_the_recorded_defect(absent_device, entry_id):
    """Called inside an MPS region, AOTAutograd runs the already-cast graph with MPS's
    autocast still on (_is_any_autocast_enabled ignores MPS): the decomposed call's inner op
    is cast again: tensordot's mm gives bfloat16, conv_transpose3d's convolution in
    bfloat16 is refused as MPS refuses it. CUDA's flag is consulted, so its tensordot
    agrees with eager."""
    import dataclasses

    case = _case_of(absent_device, entry_id, fake=True)
    ((_, value),) = _recorded(case)
    assert (value["id"], value["status"]) == ("aot-runtime-ignores-mps-autocast", "reproduced")
    departs = (r"compiled output dtypes \[torch.bfloat16\], eager gave \[torch.float32\]"
               if entry_id == "tensordot" else "failed compiled, where eager ran: .*ConvTranspose "
               "3D with BF16 or FP16 types is not supported on MPS")
    with pytest.raises(ConformanceFailure, match=departs):
        per_entry.check_compiled_policy(dataclasses.replace(
            case, entry=dataclasses.replace(case.entry, compiled_defect=None)))


@pytest.mark.parametrize("table, field, message", [
    ('{id = "nope", expect = "amp", backends = ["aot_eager"]}', "compiled_defect.id",
     "unknown defect 'nope'"),
    ('{id = "compile-upsample-vec-skips-autocast", expect = "error", backends = ["inductor"]}',
     "compiled_defect.error", 'with expect = "error"'),
    ('{id = "compile-upsample-vec-skips-autocast", expect = "amp", error = "x", '
     'backends = ["inductor"]}', "compiled_defect.error", "only with it"),
    ('{id = "compile-upsample-vec-skips-autocast", expect = "sometimes", backends = ["x"]}',
     "compiled_defect.expect", "sometimes"),
    ('{id = "compile-upsample-vec-skips-autocast", expect = "amp"}', "compiled_defect.backends",
     "non-empty array"),
    ('{id = "compile-upsample-vec-skips-autocast", expect = "amp", backends = ["x"], why = 1}',
     "compiled_defect.why", "unknown key"),
])
def test_compiled_defect_table_is_validated(tmp_path, table, field, message):
    from amp_conformance.schema import oplist
    from amp_conformance.schema.problems import OpListError

    path = tmp_path / "l.toml"
    path.write_text('[list]\ndevice = "cpu"\n[[entry]]\nid = "x"\nop = "mm"\n'
                    'category = "torch_16"\nargs = [{shape = [2, 2]}, {shape = [2, 2]}]\n'
                    f"compiled_defect = {table}\n")
    with pytest.raises(OpListError) as caught:
        oplist.parse_file(path)
    assert field in str(caught.value) and message in str(caught.value)


def test_norm_equal_and_flash_compiled_items_are_not_applicable_with_the_observed_reason():
    """Dynamo cannot trace the raw norm binding nor put torch.equal's Python bool in a
    graph (both seen here, on CPU): the compiled items of those entries are skipped saying
    so, on every device and amp dtype; no other check of theirs is."""
    with pytest.raises(Exception, match="marked as skipped"):
        torch.compile(lambda x: torch._C._VariableFunctions.norm(x, 2), backend="eager",
                      fullgraph=True)(torch.ones(3))
    with pytest.raises(Exception, match="Data dependent operator"):
        torch.compile(torch.equal, backend="eager", fullgraph=True)(torch.ones(3), torch.ones(3))
    torch._dynamo.reset()
    entries = {e.id: e for e in load_oplist("cuda").entries}
    for eid, said in [("norm-Scalar", "Attempted to call function marked as skipped"),
                      ("norm-ScalarOpt_dim", "Attempted to call function marked as skipped"),
                      ("equal", "Data dependent operator"),
                      ("_scaled_dot_product_flash_attention", "source must be provided")]:
        case = Case(Target("cuda", eid != "equal"), torch.float16, entries[eid])
        reason = case.skip_reason("compiled_policy")
        assert reason.startswith("not applicable: ") and said in reason, eid
        assert case.skip_reason("policy") != reason, eid


# -- a code generator's tolerance -------------------------------------------------------


def _one_rounding_apart(dtype):
    """addr as CUDA's Half kernel computes it (the product rounded, then the sum) and as
    generated code does (one rounding): a one-rounding difference."""
    g = torch.Generator().manual_seed(3)
    inp, v1, v2 = (torch.randn(*s, generator=g).to(dtype).float() for s in ((8, 8), (8,), (8,)))
    eager = (inp + (v1[:, None] * v2).to(dtype).float()).to(dtype)
    generated = (inp + v1[:, None] * v2).to(dtype)
    return generated, eager, (inp, v1, v2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_codegen_tolerance_absorbs_one_rounding_not_a_wrong_result(dtype):
    generated, eager, (inp, v1, v2) = _one_rounding_apart(dtype)
    with pytest.raises(AssertionError):  # assert_close's defaults do not absorb it
        torch.testing.assert_close(generated, eager)
    backends.compare_outputs((generated, 1), (eager, 1), "inductor", "close", None, "c")
    with pytest.raises(ConformanceFailure):  # the bitwise backends still compare bitwise
        backends.compare_outputs(generated, eager, "aot_eager", "bitwise", None, "c")
    wrong_op = (v1[:, None] * v2).to(dtype)  # addr without its input: outer
    other = torch.bfloat16 if dtype == torch.float16 else torch.float16
    through_other = (inp.to(other) + v1.to(other)[:, None] * v2.to(other)).to(dtype)
    for wrong in [wrong_op, eager.float(), *([through_other] if dtype == torch.float16 else [])]:
        with pytest.raises(ConformanceFailure):
            backends.compare_outputs(wrong, eager, "inductor", "close", None, "c")
    assert backends.codegen_tolerance(torch.ones(2)) is None  # float32: assert_close's own


def test_a_check_meets_no_compile_cache_of_another():
    """PyTorch's FX graph and AOTAutograd caches outlive a dynamo reset (on disk, shared by
    processes): a check runs with them off, so its verdict does not depend on which
    checks ran before it (on torch 2.11 a float16 region was served a bfloat16 artifact).
    The scenario that exercises them has its own folder."""
    import os

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    before = (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache,
              os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    with backends.compiling():
        assert not inductor_config.fx_graph_cache and not functorch_config.enable_autograd_cache
    with backends.compiling(caches=True):
        assert inductor_config.fx_graph_cache and functorch_config.enable_autograd_cache
        folder = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert os.path.isdir(folder) and "amp-compile-" in folder
    assert (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache,
            os.environ.get("TORCHINDUCTOR_CACHE_DIR")) == before
    assert not os.path.exists(folder)


def test_a_fresh_compile_in_the_other_region_gets_its_own_artifact(monkeypatch):
    """recompiled_in_other_region: compiled afresh for each region with the caches on; on
    torch 2.13 the AOTAutograd cache's artifact follows the region (pytorch#181564), before
    it the scenario is a strict xfail (observed with aot_eager on torch 2.12.0 too)."""
    scenario = regions.by_name("recompiled_in_other_region")
    for backend in ("inductor", "aot_eager"):
        assert scenario.known_defect(backend, "2.12.0").startswith(
            "known PyTorch defect compile-cache-key-ignores-autocast-dtype")
        assert scenario.known_defect(backend, "2.13.0") is None
    lookups = []
    real = caches.lookups
    monkeypatch.setattr(caches, "lookups", lambda: lookups.append(real()) or lookups[-1])
    regions.check(scenario, CPU, torch.bfloat16, "aot_eager")
    assert lookups and lookups[0] >= len(scenario.calls)  # aot_eager reached the cache


def test_which_backends_reach_the_aot_autograd_cache_and_in_which_run():
    scenario = regions.by_name("recompiled_in_other_region")
    for tier in (None, "inductor"):
        assert "backend eager reaches no compile cache" in regions.not_applicable(
            scenario, CPU, torch.bfloat16, "eager", tier)
    assert "not applicable in the default run: the first compile that reaches the " \
        "AOTAutograd cache in a process imports inductor's lowering" in regions.not_applicable(
            scenario, CPU, torch.bfloat16, "aot_eager")
    for backend in ("aot_eager", "inductor"):
        assert regions.not_applicable(scenario, CPU, torch.bfloat16, backend, "inductor") \
            is None


def test_a_backend_that_never_looks_the_cache_up_is_not_applicable(monkeypatch):
    monkeypatch.setattr(caches, "lookups", lambda: 0)
    with pytest.raises(regions.NotApplicable, match="looked the AOTAutograd cache up 0 time"):
        regions.check(regions.by_name("recompiled_in_other_region"), CPU, torch.bfloat16,
                      "aot_eager")


def test_call_forms_cover_both_constructors_and_every_spelling():
    forms = bodies.call_forms("cpu")
    assert sorted(forms) == sorted(f"{ctor}-{spelling}" for ctor in ("autocast", "legacy")
                                   for spelling in ("positional", "keyword", "mixed"))
    for name, make in forms.items():  # each spelling builds the region it is given
        region = make("cpu", False, torch.float16, False)
        assert (region.device, region.fast_dtype, region._enabled, region._cache_enabled) == (
            "cpu", torch.float16, False, False), name
