"""The transforms family: its check catches a transform that drops autocast (in process,
naming the transform, the list and the entry), PyTorch's own departures are data that
validates, and functional_call matches the module."""

import tomllib

import pytest
import torch

from amp_conformance.checks.registry import mutants
from amp_conformance.checks.transforms import check
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.target import Target
from amp_conformance.schema.oplist import OpListError

CPU = Target("cpu")
CATALOGUE = mutants()


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_check_catches_a_transform_that_drops_autocast(transform):
    mutant = CATALOGUE[f"transforms-{transform}-drops-autocast"]
    undo = mutant.apply()
    try:
        with pytest.raises(ConformanceFailure) as info:
            check.check_transform(CPU, torch.bfloat16, transform, "torch_16")
    finally:
        undo()
    for text in mutant.expected_texts:
        assert text in str(info.value), str(info.value)
    check.check_transform(CPU, torch.bfloat16, transform, "torch_16")  # undone: passes


def test_known_departures_are_recorded_as_reproduced():
    recorded = []
    check.check_transform(CPU, torch.bfloat16, "vmap", "torch_16",
                          record=lambda *kv: recorded.append(kv))
    (value,) = [v for k, v in recorded if k == "amp_defect"]
    assert value["id"] == "func-vmap-skips-autocast" and value["status"] == "reproduced"


def test_known_entries_exist_where_they_were_seen():
    """On CPU's lists, or the fakegpu example's (where four were seen)."""
    from pathlib import Path

    from amp_conformance.checks.case import load_oplist
    from amp_conformance.schema import oplist

    fakegpu = Path(__file__).parents[1] / "examples" / "fakegpu" / "fakegpu.toml"
    ids = {e.id for e in load_oplist("cpu").entries}
    ids |= {e.id for e in oplist.parse_file(fakegpu).entries}
    for transform, known in check.known().items():
        assert known.entries <= ids, (transform, sorted(known.entries - ids))
        for device, entries in known.devices.items():
            vendor = Path(__file__).parents[1] / "examples" / "vendors" / device / f"{device}.toml"
            there = ({e["id"] for e in tomllib.loads(vendor.read_text())["entry"]}
                     if vendor.exists() else {e.id for e in load_oplist(device).entries})
            assert entries <= there, (transform, device, sorted(entries - there))
    vmap = check.known()["vmap"]  # seen on CUDA only: CPU must still hold its policy
    assert "_convolution" in vmap.on("cuda") and "_convolution" not in vmap.on("cpu")


@pytest.mark.parametrize("text, field", [
    ('[vmapp]\ndefect = "func-vmap-skips-autocast"\nentries = []\n', "unknown transform"),
    ('[vmap]\ndefect = "nosuch"\nentries = []\n', "field 'defect'"),
    ('[vmap]\ndefect = "func-vmap-skips-autocast"\nentries = "mm"\n', "field 'entries'"),
    ('[vmap]\ndefect = "func-vmap-skips-autocast"\nentries = []\n[vmap.devices]\ncuda = "mm"\n',
     "field 'devices'"),
])
def test_bad_known_file_names_file_table_and_field(tmp_path, monkeypatch, text, field):
    (tmp_path / check.KNOWN_FILE).write_text(text)
    monkeypatch.setattr(check, "builtin_dir", lambda: tmp_path)
    check.known.cache_clear()
    try:
        with pytest.raises(OpListError, match=field) as info:
            check.known()
    finally:
        check.known.cache_clear()
    assert str(tmp_path / check.KNOWN_FILE) in str(info.value)


def test_functional_call_matches_the_module():
    check.check_functional_call(CPU, torch.bfloat16)


def test_fake_run_skips_transforms_with_the_reason(pytester):
    result = pytester.runpytest("--pyargs", "amp_conformance.suite", "-rs", "-q",
                                "--device", "cuda", "--fake", "-k", "test_transform")
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0 and not {"passed", "failed"} & set(outcomes)


@pytest.mark.parametrize("wrong", [0.0, 1.1])
def test_functional_call_gradients_are_compared_where_they_are_not_zero(monkeypatch, wrong):
    """A grad transform that returns zero gradients fails: the loss is a weighted sum (the
    plain sum of a softmax has a zero gradient, which any transform would match); so does
    one 10 % off (the amp dtype's tolerance is bfloat16's precision)."""
    _wrong_grad(monkeypatch, wrong, under_autocast_only=True)
    with pytest.raises(ConformanceFailure, match="gradient of"):
        check.check_functional_call(Target("cpu"), torch.bfloat16)


def test_functional_call_that_departs_without_autocast_too_is_not_autocasts(monkeypatch):
    """A transform wrong with autocast off as well (a device's functorch, not its autocast:
    IPEX's layer_norm under torch.func.grad) is not applicable, and says so."""
    _wrong_grad(monkeypatch, 0.0, under_autocast_only=False)
    with pytest.raises(NotApplicable, match="departs without autocast too .*gradient of"):
        check.check_functional_call(Target("cpu"), torch.bfloat16)


def _wrong_grad(monkeypatch, factor: float, under_autocast_only: bool) -> None:
    """torch.func.grad with every gradient scaled by ``factor`` (where autocast is on only,
    or always)."""
    real = torch.func.grad

    def scaled(fn, **kwargs):
        def run(params):
            grads, aux = real(fn, **kwargs)(params)
            if under_autocast_only and not torch.is_autocast_enabled("cpu"):
                return grads, aux
            return {k: g * factor for k, g in grads.items()}, aux
        return run
    monkeypatch.setattr(torch.func, "grad", scaled)


MIXED = '''
[list]
device = "cpu"
source = "tests/test_transforms.py"

[[entry]]
id = "index_copy-mixed-lower-precision"
op = "index_copy"
category = "torch_need_autocast_promote"
args = [
    {shape = [4, 3], dtype = "float16"}, 0, {values = [0, 2], dtype = "int64"},
    {shape = [2, 3], dtype = "bfloat16"},
]
expect = "float32"
cast = "float32"
[entry.reference_defect]
id = "prioritize-mixed-lower-precision"
expect = "error"
error = "Unexpected floating ScalarType in at::autocast::prioritize"
'''


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_an_entry_that_raises_untransformed_too_is_a_limit_not_a_departure(tmp_path, transform):
    """PyTorch's prioritize raises for float16 beside bfloat16 with or without the transform
    (seen on CUDA's addcmul entry, tensor arguments the transform maps over)."""
    path = tmp_path / "mixed.toml"
    path.write_text(MIXED)
    (entry,) = [e for e in check.load_oplist("cpu", (str(path),)).entries
                if e.id == "index_copy-mixed-lower-precision"]
    case = check.Case(CPU, torch.bfloat16, entry)
    with pytest.raises(check.Limit, match="the untransformed call raises RuntimeError: "
                       "Unexpected floating ScalarType in at::autocast::prioritize"):
        check.departure(case, transform)


def test_an_output_without_its_batch_dimension_is_never_indexed(monkeypatch):
    """A vmap whose output lost its batch dimension (PyTorch/XLA's linalg.svdvals), without
    autocast too, excuses the entry, found from the shape: reading a sample of such an
    output broke XLA."""
    real = torch.func.vmap

    def first_only(fn, **kwargs):
        return lambda *args: real(fn, **kwargs)(*args)[0]
    monkeypatch.setattr(torch.func, "vmap", first_only)
    (entry,) = [e for e in check.load_oplist("cpu").entries if e.id == "mm"]
    with pytest.raises(check.Excused, match=r"vmap gave an output of shape \(8, 8\), without "
                                            "the batch dimension of 2 first under the transform "
                                            "without autocast too"):
        check.departure(check.Case(CPU, torch.bfloat16, entry), "vmap")


@pytest.mark.parametrize("always", [True, False])
def test_a_transform_that_departs_without_autocast_too_is_excused(monkeypatch, always):
    """A vmap that gives other values with autocast off as well (a device's batching rule,
    IPEX's frozen_batch_norm) is excused for the entry, once under autocast it agrees with
    the same transformed call on inputs cast by hand; one that does so under autocast only
    is the departure the check is for."""
    real = torch.func.vmap

    def scaled(fn, **kwargs):
        def run(*args):
            out = real(fn, **kwargs)(*args)
            return out * 1.5 if always or torch.is_autocast_enabled("cpu") else out
        return run
    monkeypatch.setattr(torch.func, "vmap", scaled)
    case = _case("mm")
    if always:
        with pytest.raises(check.Excused, match="departs without autocast too, on inputs cast "
                                                "by hand .*agrees with that transformed control"):
            check.departure(case, "vmap")
    else:
        assert "not equal" in check.departure(case, "vmap")


def _case(entry_id: str) -> check.Case:
    (entry,) = [e for e in check.load_oplist("cpu").entries if e.id == entry_id]
    return check.Case(CPU, torch.bfloat16, entry)


def test_a_value_quirk_without_autocast_excuses_no_dtype_departure(monkeypatch):
    """Under autocast the batched call gives float32 where the untransformed one gives
    bfloat16 (a policy that lacks bmm), and without autocast the batched call rounds
    otherwise: a departure of values never excuses one of dtypes."""
    real = torch.func.vmap

    def quirky(fn, **kwargs):
        def run(*args):
            out = real(fn, **kwargs)(*args)
            return out.float() if torch.is_autocast_enabled("cpu") else out * (1 + 2 ** -6)
        return run
    monkeypatch.setattr(torch.func, "vmap", quirky)
    assert check.departure(_case("mm"), "vmap").startswith("output dtypes ['float32']")


def test_an_entry_excused_by_its_own_departure_is_still_held_to_autocast(monkeypatch):
    """Without autocast the transform departs (values scaled), and under autocast it departs
    further (scaled twice): against the transformed control on inputs cast by hand it does
    not agree, so it is a departure."""
    real = torch.func.vmap

    def scaled(fn, **kwargs):
        def run(*args):
            out = real(fn, **kwargs)(*args) * 1.5
            return out * 1.5 if torch.is_autocast_enabled("cpu") else out
        return run
    monkeypatch.setattr(torch.func, "vmap", scaled)
    said = check.departure(_case("mm"), "vmap")
    assert "against the same transformed call on inputs cast by hand" in said, said


def test_an_excused_entry_is_recorded_with_its_evidence(monkeypatch):
    """A transform whose values depart without autocast too (scaled, with autocast and
    without) excuses the entries that keep their policy under it (mm among them), each with
    its evidence recorded on the item. The departure is made here, not taken from the host's
    kernels: the reference's own excused entries depend on the CPU's path."""
    real = torch.func.vmap

    def scaled(fn, **kwargs):
        def run(*args):
            return real(fn, **kwargs)(*args) * 1.5
        return run
    monkeypatch.setattr(torch.func, "vmap", scaled)
    recorded = []
    check.check_transform(CPU, torch.bfloat16, "vmap", "torch_16",
                          record=lambda *kv: recorded.append(kv))
    (excuse,) = [v for k, v in recorded if k == "amp_excuse"]
    assert excuse["mechanism"] == "transform limit"
    assert any(e.startswith("mm: departs without autocast too") for e in excuse["evidence"]), \
        excuse["evidence"]
    assert all(": " in e and "without autocast too" in e for e in excuse["evidence"])


def test_an_entry_may_switch_the_transforms_check_off_for_itself(tmp_path):
    """``skip = [{check = "transforms", ...}]``: the check calls each entry, so an entry the
    transform cannot take (IPEX's rpn_nms aborts the process when differentiated) names it."""
    path = tmp_path / "skip.toml"
    path.write_text('[list]\ndevice = "cpu"\n\n[[entry]]\nid = "mm-untransformable"\nop = "mm"\n'
                    'category = "torch_16"\nargs = [{shape = [4, 4]}, {shape = [4, 4]}]\n'
                    'skip = [{check = "transforms", reason = "aborts when differentiated"}]\n')
    (entry,) = [e for e in check.load_oplist("cpu", (str(path),)).entries
                if e.id == "mm-untransformable"]
    case = check.Case(CPU, torch.bfloat16, entry)
    assert case.skip_reason("transforms") is not None
    assert "aborts when differentiated" in case.skip_reason("transforms")
    assert case.skip_reason("policy") is None
