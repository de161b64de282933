"""PyTorch's own defects are tracked apart: an entry states the intended contract, its
``reference_defect`` what PyTorch does today; a device doing either passes, the report
says which, and a device doing neither fails with both accounts."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

from amp_conformance.checks import defects as verdicts
from amp_conformance.checks.case import Case, load_oplist
from amp_conformance.checks.numerics.check import check_numerics
from amp_conformance.checks.policy.check import check_policy
from amp_conformance.checks.transforms import check as transforms
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.core.target import Target
from amp_conformance.plugin.report.render import render_markdown
from amp_conformance.schema import defects, departures, oplist
from amp_conformance.schema.problems import OpListError
from tests import children

AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _case(device: str, entry_id: str, amp_dtype=torch.bfloat16, fake: bool = False) -> Case:
    (entry,) = [e for e in load_oplist(device, ()).entries if e.id == entry_id]
    return Case(Target(device, fake), amp_dtype, entry)


@pytest.fixture
def cat_kernel():
    """Replace AutocastCPU's cat kernel by ``cast(tensors) -> dtype`` (restored after)."""
    libraries = []

    def plant(choose) -> None:
        def cat(tensors, dim=0):
            with torch._C._ExcludeDispatchKeyGuard(AUTOCAST_CPU):
                to = choose(tensors)
                return torch.ops.aten.cat.default([t.to(to) for t in tensors], dim)
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("cat", cat, "AutocastCPU")
        libraries.append(lib)

    yield plant
    for lib in libraries:
        lib._destroy()


def _widest(tensors):
    return functools.reduce(torch.promote_types, [t.dtype for t in tensors])


def _run(case, check):
    recorded = []
    verdicts.verdict(case, check, lambda key, value: recorded.append((key, value)))
    return recorded


def test_every_use_names_a_recorded_defect_and_every_defect_is_used():
    used = {use.id for d in oplist.builtin_devices() for e in load_oplist(d, ()).entries
            for use in (e.reference_defect, e.compiled_defect) if use}
    used |= {d.defect for d in departures.builtin().departures}  # oplists/opinfo.toml
    used |= {k.defect for k in transforms.known().values()}  # oplists/transforms.toml
    code = "".join(p.read_text() for p in Path(verdicts.__file__).parents[1].rglob("*.py"))
    recorded = set(defects.registry())
    assert used <= recorded
    # a defect no entry names is named by a check (by id, in the package's code)
    assert all(d in used or f'"{d}"' in code for d in recorded), recorded - used


def test_torch_reproduces_the_defect_and_passes():
    case = _case("cpu", "cat-mixed-lower-precision")
    with pytest.raises(ConformanceFailure, match="raised inside autocast"):
        check_policy(case)  # the contract alone: PyTorch departs from it
    (key, value), = _run(case, check_policy)
    assert key == verdicts.PROPERTY and value["status"] == verdicts.REPRODUCED
    assert value["id"] == "prioritize-mixed-lower-precision"
    assert "https://github.com/pytorch/pytorch/issues/100932" in value["links"]


def test_a_device_doing_what_is_intended_fixes_it(cat_kernel):
    cat_kernel(_widest)
    case = _case("cpu", "cat-mixed-lower-precision")
    for check in (check_policy, check_numerics):
        (_, value), = _run(case, check)
        assert value["status"] == verdicts.FIXED


def test_a_device_doing_neither_fails_with_both_accounts(cat_kernel):
    cat_kernel(lambda tensors: torch.bfloat16)  # casts float16 down to bfloat16: neither
    with pytest.raises(ConformanceFailure) as info:
        _run(_case("cpu", "cat-mixed-lower-precision"), check_policy)
    message = str(info.value)
    assert "expected torch.float32" in message or "float32" in message
    assert "Nor does it match PyTorch's behaviour today, reference defect " \
           "prioritize-mixed-lower-precision" in message
    assert "ran inside autocast; PyTorch raises 'Unexpected floating ScalarType" in message


def test_a_fixed_defect_leaves_only_the_contract(monkeypatch):
    case = _case("cpu", "cat-mixed-lower-precision")
    defect = defects.registry()["prioritize-mixed-lower-precision"]
    assert defect.applies("2.13.0")
    # fixed in the running torch's release (the check reads the running version)
    running = ".".join(str(oplist.release(torch.__version__)).split(".")[:2])
    fixed = defects.Defect(defect.id, defect.links, defect.summary, fixed=running)
    assert not fixed.applies(torch.__version__) and fixed.applies("2.0.0")
    monkeypatch.setitem(defects.registry(), defect.id, fixed)
    with pytest.raises(ConformanceFailure, match="raised inside autocast"):
        _run(case, check_policy)


@pytest.mark.parametrize("fake_device", ["xpu"], indirect=True)
def test_no_kernel_today_is_accepted_for_the_defect_but_not_the_contract(fake_device):
    case = _case(fake_device, "_addmm_activation", torch.float16, fake=True)
    with pytest.raises(ConformanceFailure, match="entered no AutocastXPU kernel"):
        check_policy(case)
    (_, value), = _run(case, check_policy)
    assert value["status"] == verdicts.REPRODUCED


@pytest.mark.parametrize("table, field, message", [
    ('{id = "no-such-defect", expect = "amp"}', "reference_defect.id", "unknown defect 'no-such-defect'"),
    ('{id = "prioritize-mixed-lower-precision", expect = "error"}', "reference_defect.error",
     "needs the start of the message"),
    ('{id = "cast-cache-no-grad", expect = "amp", kernel = "no"}', "reference_defect.kernel",
     "expected true or false"),
    ('{id = "cast-cache-no-grad", expect = "amp", colour = 1}', "reference_defect.colour", "unknown key"),
])
def test_a_malformed_use_names_file_entry_and_field(tmp_path, table, field, message):
    path = tmp_path / "mine.toml"
    path.write_text(f'[list]\ndevice = "cpu"\n\n[[entry]]\nid = "mm2"\nop = "mm"\n'
                    f'category = "torch_16"\nargs = [{{shape = [2, 2]}}, {{shape = [2, 2]}}]\n'
                    f"reference_defect = {table}\n")
    with pytest.raises(OpListError) as info:
        oplist.parse_file(path)
    text = str(info.value)
    assert str(path) in text and "'mm2'" in text and f"field '{field}'" in text and message in text


@pytest.mark.slow
def test_the_report_lists_the_defects_the_device_met(tmp_path):
    report = tmp_path / "r.json"
    done = children.run(
        [sys.executable, "-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu", "-q",
         "-p", "no:cacheprovider", "-k", "test_policy and mixed", "--conformance-report", str(report)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(report.read_text())
    (row,) = data["reference_defects"]
    assert row["id"] == "prioritize-mixed-lower-precision" and not row["fixed"]
    assert len(row["reproduced"]) == 4  # cat and stack under float16 and bfloat16
    assert "cpu reproduces it (4 items as PyTorch today, 0 as intended)" in render_markdown(data)
    assert "Reference defects: PyTorch&#x27;s own" in report.with_suffix(".html").read_text() \
        or "Reference defects: PyTorch's own" in report.with_suffix(".html").read_text()


def test_checks_outside_the_lists_name_a_defect_by_its_symptom(monkeypatch):
    from amp_conformance.checks.cache_interactions import check as cache

    def failing(message):
        def run():
            raise ConformanceFailure(message)
        return run

    symptom = f"torch.mm after a no_grad pass: {cache.NO_GRAD_SYMPTOM}"
    recorded = []
    defect = defects.registry()[cache.NO_GRAD_DEFECT]
    assert defect.applies("2.10.0") and not defect.applies("2.11.0")  # fixed in 2.11
    monkeypatch.setitem(defects.registry(), defect.id,  # as on a torch that has it
                        defects.Defect(defect.id, defect.links, defect.summary, fixed=None))

    def known(run):
        verdicts.known_departure(cache.NO_GRAD_DEFECT, run, cache.NO_GRAD_SYMPTOM,
                                 lambda k, v: recorded.append(v["status"]))

    known(failing(symptom))
    known(lambda: None)
    assert recorded == [verdicts.REPRODUCED, verdicts.FIXED]
    with pytest.raises(ConformanceFailure, match="something else"):
        known(failing("something else"))
    monkeypatch.setitem(defects.registry(), defect.id,
                        defects.Defect(defect.id, defect.links, defect.summary, fixed="2.0"))
    with pytest.raises(ConformanceFailure, match="without autograd history"):
        known(failing(symptom))
