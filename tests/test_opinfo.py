"""The OpInfo tier (checks/opinfo): the reference autocast, the verdicts, the data file of
departures, the option and the report's operator-surface table (the atlas built from it:
tests/test_atlas.py)."""

from __future__ import annotations

import dataclasses
import os
import sys

import pytest
import torch

from tests import children

pytest.importorskip("expecttest", reason="the OpInfo tier needs expecttest (pip install -e '.[dev]')")

from amp_conformance.checks import reference  # noqa: E402
from amp_conformance.checks.opinfo import calls, check, forms, judge, source  # noqa: E402
from amp_conformance.checks.opinfo.report import markdown, operator_surface  # noqa: E402
from amp_conformance.checks.registry import mutants  # noqa: E402
from amp_conformance.core.errors import ConformanceFailure  # noqa: E402
from amp_conformance.core.target import Target  # noqa: E402
from amp_conformance.schema import departures  # noqa: E402
from amp_conformance.schema.problems import OpListError  # noqa: E402

CATALOGUE = mutants()

CPU = Target("cpu")


def test_the_reference_table_gives_each_cpu_overload_its_declared_policy():
    table = reference.policy_table(CPU, torch.bfloat16)
    assert table.rules["aten::mm"].policy == "lower"
    assert table.rules["aten::cat"].policy == "promote"
    assert table.rules["aten::linalg_inv"].policy == "fp32"
    assert not table.conflicts


def test_the_reference_casts_at_policy_overloads_and_leaves_the_rest_alone():
    table = reference.policy_table(CPU, torch.bfloat16)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with reference.casting(table) as cast_at:
        product = torch.matmul(a, b)  # composite on CPU autocast? matmul has its own kernel
        sine = torch.sin(a)
    assert product.dtype == torch.bfloat16 and sine.dtype == torch.float32
    assert cast_at == ["aten::matmul"]
    assert torch.mm(a, b).dtype == torch.float32  # nothing left registered in effect


def test_promote_follows_the_widest_type_the_contract_intends():
    half, bf = torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.bfloat16)
    assert reference.promote_dtype(torch.bfloat16, (half, bf), "cpu") == torch.float32
    assert reference.promote_dtype(torch.bfloat16, (bf, torch.ones(2, dtype=torch.float64)), "cpu") \
        == torch.bfloat16


@pytest.mark.parametrize("name, kind", [("addmm", judge.POLICY), ("sin", judge.ALONE),
                                        ("tensordot", judge.COMPOSITE)])
def test_every_form_of_an_op_is_judged_with_its_kind(name, kind):
    case = check.OpinfoCase(CPU, torch.bfloat16, source.OpRef(name), samples=1)
    verdicts, _ = check.verdicts_of(case)
    assert {v.form.label for v in verdicts} >= {"sample0", "sample0-noncontiguous"}
    function = [v for v in verdicts if v.form.variant == calls.FUNCTION]
    assert all(v.outcome == judge.AGREES for v in function), [v.detail for v in function]
    assert {v.kind for v in function} == {kind}
    # a composite's out= form under autocast: its policy op's lower-precision result does
    # not fit a float32 out tensor, in PyTorch's reference as on the device (both raise)
    assert {v.outcome for v in verdicts} <= {judge.AGREES, judge.CAPABILITY}


def test_the_variants_of_an_op_are_judged_and_enter_no_autocast_kernel():
    """addmm as a method, in place and with out=: PyTorch has no autocast kernel for the
    in-place and out= overloads (they run on the dtypes they are given), and the method
    enters the same one as the function."""
    verdicts, _ = check.verdicts_of(check.OpinfoCase(CPU, torch.bfloat16, source.OpRef("addmm"),
                                                     samples=1))
    by = {v.form.label: v for v in verdicts}
    assert {"sample0-method", "sample0-inplace", "sample0-out"} <= set(by), sorted(by)
    assert by["sample0-method"].kind == judge.POLICY
    assert by["sample0-inplace"].kind == by["sample0-out"].kind == judge.ALONE
    assert all(v.outcome == judge.AGREES for v in verdicts), [v.detail for v in verdicts]


def test_a_dropped_keyword_fails_naming_the_form_and_a_reproduction_that_runs():
    undo = CATALOGUE["opinfo-addmm-drops-beta-alpha"].apply()
    try:
        with pytest.raises(ConformanceFailure) as caught:
            check.check(check.OpinfoCase(CPU, torch.bfloat16, source.OpRef("addmm"), samples=1),
                        lambda *_: None)
        message = str(caught.value)
        assert "OpInfo addmm" in message and "sample0 (policy op)" in message
        code = message.split("Reproduce the first:\n", 1)[1]
        exec(compile(code, "<reproduction>", "exec"), {})  # runs as pasted
    finally:
        undo()


def test_a_recorded_departure_is_the_defect_reproduced_not_a_pass_by_skip():
    verdicts, _ = check.verdicts_of(check.OpinfoCase(CPU, torch.bfloat16,
                                                     source.OpRef("linalg.pinv", "singular"),
                                                     samples=1))
    assert {v.outcome for v in verdicts if v.form.build == torch.float32} == {judge.DEFECT}
    assert {v.defect for v in verdicts if v.defect} == {"linalg-pinv-not-on-fp32-list"}


def test_fake_samples_keep_their_layout():
    sample = source.draw(source.OpRef("addmm").lookup(), "cpu", torch.float32, 1)[0].noncontiguous()
    with Target("cuda", fake=True).tensors():
        moved = source.to_fake_device(sample, "cuda")
        assert moved.input.device.type == "cuda"
        assert moved.input.stride() == sample.input.stride()


@pytest.mark.parametrize("text, field", [
    ('[[departure]]\nop = "x"\ndefect = "nope"\nerror = "e"\nevidence = "seen"\n', "defect"),
    ('[[departure]]\nop = "x"\ndefect = "linalg-pinv-not-on-fp32-list"\nevidence = "seen"\n', "error"),
    ('[[incomparable]]\nop = "x"\nreason = "r"\ncolour = 1\n', "colour"),
    ('[[incomparable]]\nop = "x"\nreason = "r"\nnoncontiguous = "yes"\n', "noncontiguous"),
    ('[[departure]]\nop = "x"\ndefect = "linalg-pinv-not-on-fp32-list"\nerror = "e"\n'
     'evidence = "s"\namp_dtypes = ["float8"]\n', "amp_dtypes"),
])
def test_a_malformed_departures_file_names_the_file_the_op_and_the_field(tmp_path, text, field):
    path = tmp_path / "opinfo.toml"
    path.write_text(text)
    with pytest.raises(OpListError) as caught:
        departures.parse(path)
    assert caught.value.field == field and str(path) in str(caught.value) and "'x" in str(caught.value)


def test_the_shipped_departures_file_parses():
    known = departures.builtin()
    assert departures.incomparable("empty_like", "")
    (renorm,) = departures.incomparable("nn.functional.embedding", "")
    assert renorm.covers("cuda", noncontiguous=True)  # seen on the H200, nowhere else
    assert not renorm.covers("cuda", noncontiguous=False) and not renorm.covers("cpu", True)
    assert [d.defect for d in known.departures] == [
        "mps-norm-dtype-narrowing", "mps-norm-dtype-narrowing", "linalg-pinv-not-on-fp32-list"]


@pytest.mark.parametrize("args, says", [
    (["--amp-opinfo", "--amp-opinfo-samples", "x"], "expected 'forms', 'all' or a positive number"),
    (["--amp-opinfo-samples", "2"], "--amp-opinfo-samples needs --amp-opinfo"),
])
def test_a_bad_sample_bound_is_a_usage_error(tmp_path, args, says):
    proc = children.run([sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "-q",
                           "-p", "no:cacheprovider", *args], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 4 and says in proc.stderr + proc.stdout


BLOCK_EXPECTTEST = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "expecttest":
            raise ModuleNotFoundError("No module named 'expecttest'", name=name)

sys.meta_path.insert(0, _Absent())
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_without_expecttest_the_tier_is_a_usage_error_naming_the_fix(tmp_path, workers):
    """Serially op_db's import fails; an xdist controller, which does not import op_db,
    finds expecttest missing before it starts a worker: the same error, no traceback."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_EXPECTTEST)
    # kept: a package installed by PYTHONPATH (--target) stays importable
    paths = [str(tmp_path / "site"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = children.run([sys.executable, "-m", "pytest", "--pyargs", "amp_conformance.suite",
                           "-q", "-p", "no:cacheprovider", "--amp-opinfo", *workers],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    out = proc.stderr + proc.stdout
    assert proc.returncode == 4, out[-2000:]
    assert "--amp-opinfo needs PyTorch's OpInfo database" in out
    assert "No module named 'expecttest' (pip install expecttest)" in out
    assert "Traceback" not in out and "gw0" not in out


def test_an_xdist_controller_checks_op_db_without_importing_it(monkeypatch):
    monkeypatch.delitem(sys.modules, source.MODULE, raising=False)
    source.check_installed()
    assert source.MODULE not in sys.modules
    monkeypatch.setattr(source, "NEEDS", ("amp_no_such_package",))
    with pytest.raises(source.OpDbUnavailable, match="No module named 'amp_no_such_package'"):
        source.check_installed()


def _quantile(build=torch.float32):
    op = source.OpRef("quantile").lookup()
    return op, source.draw(op, "cpu", build, None)


def test_a_keyword_value_whose_covered_samples_hide_it_gets_a_sample_that_shows_it():
    """quantile's covering samples give interpolation='midpoint' only where it equals the
    default (one element, or a position that is a whole number): the draw adds the first
    sample where it changes the result, and counts it."""
    op, samples = _quantile()
    plain = forms.cover(samples, torch.float32)
    changes = calls.keyword_changes(op, samples, "cpu", False)
    midpoint = [i for i in plain.indices if samples[i].kwargs.get("interpolation") == "midpoint"]
    assert midpoint and not any(changes(i, "interpolation") for i in midpoint)
    shown = forms.show_keywords(samples, torch.float32, plain, changes)
    added = [i for i in shown.redrawn if samples[i].kwargs.get("interpolation") == "midpoint"]
    assert len(added) == 1 and changes(added[0], "interpolation")
    assert set(plain.indices) < set(shown.indices) and shown.forms == plain.forms
    assert calls.counts([calls.Drawn(torch.float32, samples, shown)])["forms_redrawn"] == len(
        shown.redrawn)


def test_the_keyword_search_is_stable_and_stops_at_a_keyword_without_default():
    """The same samples on every call; a keyword the call cannot go without is tried once."""
    op, samples = _quantile()
    plain = forms.cover(samples, torch.float32)
    first = forms.show_keywords(samples, torch.float32, plain,
                                calls.keyword_changes(op, samples, "cpu", False))
    assert forms.show_keywords(samples, torch.float32, plain,
                               calls.keyword_changes(op, samples, "cpu", False)) == first
    tried = []

    def no_default(i, key):
        tried.append((i, key))
        return None
    assert forms.show_keywords(samples, torch.float32, plain, no_default).redrawn == ()
    keys = [k for _, k in tried]
    assert sorted(keys) == sorted(set(keys))


def test_on_fake_tensors_a_keyword_changes_the_result_by_its_dtype_or_shape():
    """keepdim=True changes sum's shape, which fake tensors keep; mse_loss's reduction='sum'
    changes its value only."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=False):
        for name, key, value, changed in (("sum", "keepdim", True, True),
                                          ("nn.functional.mse_loss", "reduction", "sum", False)):
            op = source.OpRef(name).lookup()
            samples = source.draw(op, "cpu", torch.float32, None)
            i = next(i for i, s in enumerate(samples)
                     if s.kwargs.get(key) == value and s.input.dim() > 0)
            assert calls.keyword_changes(op, samples, "cpu", True)(i, key) is changed, name


def test_the_operator_surface_table_counts_ops_by_kind_and_forms_by_outcome():
    results = [
        {"check": "opinfo", "amp_dtype": "bfloat16", "outcome": "passed",
         "opinfo": {"kind": "policy op", "outcomes": {"agrees": 4}, "forms": 7,
                    "forms_drawn": 7, "samples": 30, "samples_drawn": 3, "forms_redrawn": 1}},
        {"check": "opinfo", "amp_dtype": "bfloat16", "outcome": "failed",
         "opinfo": {"kind": "policy op", "outcomes": {"agrees": 2, "failed": 2}, "forms": 5,
                    "forms_drawn": 4, "samples": 6, "samples_drawn": 2}},
        {"check": "opinfo", "amp_dtype": "bfloat16", "outcome": "skipped", "opinfo": None},
        {"check": "policy", "amp_dtype": "bfloat16", "outcome": "passed"},
    ]
    table = operator_surface(results)
    assert table["bfloat16"]["policy op"] == {
        "ops": 2, "items": {"passed": 1, "failed": 1}, "forms": {"agrees": 6, "failed": 2},
        "drawn": {"forms_drawn": 11, "forms": 12, "samples_drawn": 5, "samples": 36,
                  "forms_redrawn": 1}}
    assert table["bfloat16"]["not run here"]["ops"] == 1
    assert ("| bfloat16 | policy op | 2 | 1 | 1 | 0 | 11/12 | 5/36 | 1 | 6 | 0 | 0 | 0 | 2 |"
            in markdown(table))
    assert operator_surface(results[3:]) is None


def test_one_process_may_judge_one_device_after_another():
    """The reference kernels serve one device's tables at a time (cpu, then fake cuda, then
    cpu again once gave the second device the first one's kernels)."""
    def outcomes(target, dtype, name):
        case = check.OpinfoCase(target, dtype, source.OpRef(name), samples=1)
        return {v.outcome for v in check.verdicts_of(case, first_only=True)[0]}
    for target, dtype, name in [(CPU, torch.bfloat16, "tensordot"),
                                (Target("cuda", fake=True), torch.float16, "nn.functional.conv3d"),
                                (CPU, torch.bfloat16, "tensordot")]:
        assert outcomes(target, dtype, name) == {judge.AGREES}, (target, name)


def test_declared_incomparable_forms_are_judged_by_dtypes_on_their_device_alone():
    """An [[incomparable]] scoped to a device type and to non-contiguous forms (embedding's
    renorm on CUDA) spares those forms' values there, and no other form's."""
    from amp_conformance.checks.opinfo import calls, judge, source
    from amp_conformance.checks.reference import policy_table
    from amp_conformance.core.target import Target

    def op(x):  # another value inside autocast: a departure wherever values are compared
        return x + float(torch.is_autocast_enabled("cpu"))

    target = Target("cpu")
    scoped = departures.Incomparable("op", "", "seen not reproducible", ("cpu",), True)
    setting = judge.Setting(source.OpRef("op"), op, target, torch.bfloat16, "bitwise",
                            policy_table(target, torch.bfloat16, ()), incomparable=(scoped,))
    x = torch.ones(3)
    verdicts = {nc: judge.judge(setting, calls.Form(0, torch.float32, noncontiguous=nc),
                                lambda o: o(x)) for nc in (False, True)}
    assert verdicts[False].outcome == judge.FAILED
    assert verdicts[True].outcome == judge.AGREES
    assert verdicts[True].detail == "dtypes and shapes only: seen not reproducible"
    elsewhere = departures.Incomparable("op", "", "seen not reproducible", ("cuda",), True)
    setting = dataclasses.replace(setting, incomparable=(elsewhere,))
    form = calls.Form(0, torch.float32, noncontiguous=True)
    assert judge.judge(setting, form, lambda o: o(x)).outcome == judge.FAILED
