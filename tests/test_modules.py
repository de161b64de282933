"""The modules family (checks/modules): a module that runs wrong under autocast fails, naming
the module, the mode and what departed; the fused paths are exercised and known; PyTorch's
own fast-path defect is recorded as reproduced; the declarations are validated."""

import pytest
import torch

from amp_conformance.checks import registry
from amp_conformance.checks.modules import check, judge, source
from amp_conformance.checks.reference import policy_table
from amp_conformance.core import dispatch
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.schema import modules
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.problems import OpListError
from tests.mutants import CPU, FAKE_CUDA, mutant

ENTRIES = {e.id: e for e in modules.builtin()}
CATALOGUE = registry.mutants()


def _case(entry_id, target=CPU, dtype=torch.bfloat16):
    e = ENTRIES[entry_id]
    return check.ModuleCase(target, dtype, source.Subject(e.id, e.module, e.exercises, entry=e))


def _recorded(case):
    found = []
    check.check(case, lambda *kv: found.append(kv))
    return dict(found)


@pytest.mark.parametrize("name", [m for m, x in CATALOGUE.items() if x.family == "modules"])
def test_every_mutant_of_the_family_is_caught_naming_what_broke(name):
    m = CATALOGUE[name]
    entry = m.select.split("-", 1)[1]
    dtype = getattr(torch, m.select.split(" and ")[1].split("-")[0])
    case = _case(entry, FAKE_CUDA if m.fake else CPU, dtype)
    with mutant(name), pytest.raises(ConformanceFailure) as info:
        check.check(case, lambda *kv: None)
    for text in m.expected_texts:
        assert text in str(info.value), str(info.value)
    check.check(case, lambda *kv: None)  # undone: it passes


@pytest.mark.parametrize("entry_id, path", [
    ("MultiheadAttention-batch_first", "aten::_native_multi_head_attention"),
    ("TransformerEncoderLayer-batch_first", "aten::_transformer_encoder_layer_fwd"),
])
def test_the_fused_path_an_entry_is_here_for_is_taken_in_eval_without_grad(entry_id, path):
    """Its inputs enable the fast path outside autocast (the declaration is not stale), and
    the control, fast paths off, takes the module's computation instead."""
    setting = judge.Setting(_case(entry_id).subject, CPU, torch.bfloat16,
                            policy_table(CPU, torch.bfloat16))
    eval_no_grad = judge.Mode(False, "no_grad")
    today = judge.run(setting, eval_no_grad, judge.TODAY)
    assert today.ok and path in today.paths, (today.error, today.paths)
    control = judge.run(setting, eval_no_grad, judge.CONTROL)
    assert control.ok and control.paths == [], control.paths
    assert torch.backends.mha.get_fastpath_enabled()  # put back


def test_the_fast_path_taken_inside_cpu_autocast_is_the_recorded_defect():
    """TransformerEncoderLayer in eval without grad takes its fused path inside cpu autocast
    (torch.is_autocast_enabled() reads CUDA's flag) and answers in bfloat16 where its
    computation answers float32: reproduced, recorded on the item, the other modes agree."""
    case = _case("TransformerEncoderLayer-batch_first")
    found = check.verdicts(case)
    outcomes = {v.mode.label: v.outcome for _, v in found}
    if defect_registry()["fastpath-under-autocast-off-cuda"].applies():
        assert outcomes == {"train/grad": "agrees", "train/no_grad": "agrees",
                            "train/inference_mode": "agrees", "eval/grad": "agrees",
                            "eval/no_grad": "defect", "eval/inference_mode": "defect"}, found
        recorded = _recorded(case)
        assert recorded["amp_defect"]["id"] == "fastpath-under-autocast-off-cuda"
        assert recorded["amp_defect"]["status"] == "reproduced"
        assert recorded["amp_module"]["paths"] == ["aten::_native_multi_head_attention",
                                                   "aten::_transformer_encoder_layer_fwd"]


def test_a_fast_path_that_departs_otherwise_than_pytorch_today_fails():
    """The defect excuses exactly what the same path does through the reference: a fused
    kernel that also loses its own autocast rule is a failure."""
    with mutant("modules-fused-attention-no-autocast"), pytest.raises(ConformanceFailure) as info:
        check.check(_case("MultiheadAttention-batch_first"), lambda *kv: None)
    assert "eval/no_grad: inside autocast it took aten::_native_multi_head_attention" in \
        str(info.value) and "Reproduce the first" in str(info.value)


def test_a_module_the_policy_leaves_alone_must_give_eager_bitwise(monkeypatch):
    """Embedding casts nothing: one ulp off inside autocast is a departure."""
    real = torch.nn.Embedding.forward

    def nudged(self, x):
        out = real(self, x)
        return torch.nextafter(out, torch.full_like(out, float("inf"))) \
            if torch.is_autocast_enabled("cpu") else out
    monkeypatch.setattr(torch.nn.Embedding, "forward", nudged)
    with pytest.raises(ConformanceFailure, match=r"the control cast nothing: output 0 \(float32\)"):
        check.check(_case("Embedding"), lambda *kv: None)


def test_values_are_held_to_the_amp_dtype_at_the_outputs_scale():
    expected = torch.tensor([1000.0, 0.0, -3.0])
    rule = judge.tolerance(expected, torch.bfloat16)
    assert rule["rtol"] == 1.6e-2
    assert rule["atol"] == pytest.approx(judge.ULPS * 2 ** -7 * 1000.0)
    assert judge.tolerance(torch.tensor([1e-9]), torch.float16)["atol"] == 1e-5


def test_a_wrong_gradient_dtype_fails(monkeypatch):
    """A backend whose backward hands a float32 parameter a gradient in the autocast dtype."""
    real_run = judge.run

    def run(s, mode, how):
        found = real_run(s, mode, how)
        if how == judge.INSIDE:
            found.grads = {k: None if g is None else g.bfloat16() for k, g in found.grads.items()}
        return found
    monkeypatch.setattr(judge, "run", run)
    with pytest.raises(ConformanceFailure, match=r"gradient of input 0: bfloat16 \(3, 8\), the "
                                                 r"control's float32"):
        check.check(_case("Linear"), lambda *kv: None)


def test_the_fake_device_checks_dtypes_and_names_what_it_cannot_run():
    check.check(_case("Linear", FAKE_CUDA, torch.float16), lambda *kv: None)
    with pytest.raises(NotApplicable, match="the fake device cannot run it"):
        check.check(_case("TransformerDecoderLayer", FAKE_CUDA, torch.float16), lambda *kv: None)


def test_a_module_after_the_running_release_is_not_applicable(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[[module]]\nid = "Future"\nmodule = "FutureNorm"\nargs = [{shape = [2]}]\n'
                    'exercises = "x"\nsince = "99.0"\n')
    (entry,) = modules.parse(path)
    case = check.ModuleCase(CPU, torch.bfloat16, source.Subject(entry.id, entry.module,
                                                                entry.exercises, entry=entry))
    with pytest.raises(NotApplicable, match=r"torch.nn.FutureNorm came in torch 99.0"):
        check.check(case, lambda *kv: None)


def test_a_module_missing_from_a_release_that_should_have_it_fails_loudly(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('[[module]]\nid = "Gone"\nmodule = "GoneNorm"\nargs = [{shape = [2]}]\n'
                    'exercises = "x"\n')
    (entry,) = modules.parse(path)
    case = check.ModuleCase(CPU, torch.bfloat16, source.Subject(entry.id, entry.module,
                                                                entry.exercises, entry=entry))
    with pytest.raises(AttributeError, match=r"has no torch.nn.GoneNorm .*entry 'Gone'"):
        check.check(case, lambda *kv: None)


@pytest.mark.parametrize("text, entry, field", [
    ('[[module]]\nid = "a"\nmodule = "Linear"\nargs = [{shape = [2]}]\nexercises = "x"\n'
     'colour = 1\n', "a", "colour"),
    ('[[module]]\nid = "a"\nmodule = "Linear"\nexercises = "x"\n', "a", "args"),
    ('[[module]]\nid = "a"\nmodule = "Linear"\nargs = [{shape = [2], fill = "lumpy"}]\n'
     'exercises = "x"\n', "a", "args[0].fill"),
    ('[[module]]\nid = "a"\nmodule = "Linear"\nargs = []\nexercises = "x"\n'
     '[[module]]\nid = "a"\nmodule = "Conv1d"\nargs = []\nexercises = "y"\n', "a", "id"),
    ('[[module]]\nid = "a"\nmodule = "Linear"\nargs = []\nexercises = "x"\nsince = "soon"\n',
     "a", "since"),
])
def test_a_malformed_entry_names_the_file_the_entry_and_the_field(tmp_path, text, entry, field):
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(OpListError) as info:
        modules.parse(path)
    problem = next(p for p in info.value.errors if p.field == field)
    assert problem.path == str(path) and problem.entry == entry, info.value


def test_the_recorder_of_calls_sees_nested_calls_and_leaves_no_fence_behind():
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    with torch.no_grad(), dispatch.calls_of(tuple(judge.FAST_PATHS)) as seen:
        layer(torch.randn(2, 5, 8))
    assert seen == ["aten::_transformer_encoder_layer_fwd", "aten::_native_multi_head_attention"]
    assert not dispatch._FENCES
