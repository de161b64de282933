"""The drift command on hand-made conformance reports (schema in docs/report-schema.md)."""

from __future__ import annotations

import copy
import json

import pytest

from amp_conformance import __main__ as cli
from amp_conformance.tools import drift

SUITE = "amp_conformance/suite"


def result(test, param, outcome="passed", message=None, observed=None, op=None, entry=None,
           category=None, check=None, module="test_oplist.py", prefix=SUITE):
    amp_dtype = param.split("-")[1] if param.count("-") >= 1 else None
    return {
        "nodeid": f"{prefix}/{module}::{test}[{param}]",
        "test": test,
        "check": check or test.removeprefix("test_"),
        "param": param,
        "amp_dtype": amp_dtype,
        "category": category,
        "entry": entry,
        "op": op,
        "outcome": outcome,
        "message": message,
        "observed": observed,
    }


def policy(entry, op, dtype, category="torch_16", **kw):
    observed = kw.pop("observed", {op: [dtype], f"Tensor.{entry}": [dtype]})
    return result("test_policy", f"cpu-bfloat16-{category}-{entry}", op=op, entry=entry,
                  category=category, observed=observed, **kw)


def report(torch_version, results, device="cpu", fake=False):
    return {
        "schema": drift.SCHEMA, "torch": torch_version, "python": "3.11.7", "device": device,
        "fake": fake, "amp_dtypes": ["bfloat16", "float16"], "numerics": "bitwise",
        "options": {}, "summary": {}, "categories": {}, "results": results,
    }


def base_results():
    return [
        policy("mm", "torch.mm", "bfloat16"),
        result("test_numerics", "cpu-bfloat16-torch_16-mm", op="torch.mm", entry="mm",
               category="torch_16"),
        policy("rms_norm", "torch.rms_norm", "float32", category="torch_fp32",
               outcome="skipped", observed=None,
               message="not applicable: needs torch >= 2.12, running 2.11.0"),
        result("test_non_string_device_type", "cpu", module="test_errors.py", check="errors"),
        result("test_invalid_device_string", "", module="test_errors.py", check="errors",
               outcome="skipped",
               message="no recorded wording of 'invalid_device' for torch 2.11.0"),
    ]


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def run_cli(capsys, *argv):
    code = cli.main(["drift", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_identical_reports_exit_0(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("2.11.0", base_results()))
    b = write(tmp_path, "b.json", report("2.11.0", base_results()))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 0
    assert "no drift: the 5 items agree" in out


def test_own_torch_version_in_messages_is_no_drift(tmp_path, capsys):
    """The running torch version in a skip reason differs between every two versions."""
    later = copy.deepcopy(base_results())
    for r in later:
        if r["message"]:
            r["message"] = r["message"].replace("2.11.0", "2.11.1+cu126")
    a = write(tmp_path, "a.json", report("2.11.0", base_results()))
    b = write(tmp_path, "b.json", report("2.11.1+cu126", later))
    assert run_cli(capsys, a, b)[0] == 0


def test_install_path_and_device_prefix_do_not_matter(tmp_path):
    """Items are matched on module, test and param: another install path is the same item."""
    moved = copy.deepcopy(base_results())
    for r in moved:
        r["nodeid"] = r["nodeid"].replace(SUITE, "../venv/lib/python3.12/site-packages/amp_conformance/suite")
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.13.0", base_results()))),
                      drift.load(write(tmp_path, "b.json", report("2.13.0", moved))))
    assert d.identical


def test_policy_change_names_op_variant_and_dtypes(tmp_path, capsys):
    later = base_results()
    later[0] = policy("mm", "torch.mm", "float32", outcome="failed",
                      message="torch.mm: expected bfloat16, got float32")
    a = write(tmp_path, "a.json", report("2.13.0", base_results()))
    b = write(tmp_path, "b.json", report("2.14.1", later))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 1
    lines = out.splitlines()
    group = lines.index("torch.mm")
    assert lines[group + 1].split() == [
        "policy", "test_policy[bfloat16-torch_16-mm]:", "Tensor.mm", "bfloat16", "->", "float32;",
        "torch.mm", "bfloat16", "->", "float32", "(passed", "->", "failed)",
    ]
    assert "drift: 1 ops/checks, 1 items (1 policy)" in out


def test_policy_error_is_shown(tmp_path):
    later = base_results()
    later[0] = policy("mm", "torch.mm", None, outcome="failed", message="boom",
                      observed={"torch.mm": "error: RuntimeError: boom", "Tensor.mm": ["bfloat16"]})
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.13.0", base_results()))),
                      drift.load(write(tmp_path, "b.json", report("2.13.0", later))))
    (change,) = d.changes
    assert change.kind == "policy"
    assert change.explanation == "torch.mm bfloat16 -> error: RuntimeError: boom (passed -> failed)"


def test_newly_applicable_entry_is_availability_drift(tmp_path, capsys):
    """rms_norm is in the list since 2.12: not applicable on 2.11, checked on 2.12."""
    later = base_results()
    later[2] = policy("rms_norm", "torch.rms_norm", "float32", category="torch_fp32")
    a = write(tmp_path, "a.json", report("2.11.0", base_results()))
    b = write(tmp_path, "b.json", report("2.12.0", later))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 1
    assert ("  availability  test_policy[bfloat16-torch_fp32-rms_norm]: not applicable in A "
            "(needs torch >= 2.12, running 2.11.0); passed in B") in out.splitlines()


def test_changes_of_an_entry_collapse_into_one_line(tmp_path, capsys):
    """The same change of every check and amp dtype of an entry is one line (-v: one per item)."""
    def checks(outcome, message):
        return [result(test, f"cpu-{dtype}-torch_fp32-cholesky", outcome=outcome, message=message,
                       op="torch.cholesky", entry="cholesky", category="torch_fp32")
                for test in ("test_policy", "test_numerics") for dtype in ("bfloat16", "float16")]
    a = write(tmp_path, "a.json", report("2.13.0", checks("passed", None)))
    b = write(tmp_path, "b.json", report("2.14.1", checks(
        "skipped", "not applicable: removed in torch 2.14, running 2.14.1")))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 1
    assert out.splitlines()[-2:] == [
        "torch.cholesky",
        "  availability  4 items (test_numerics, test_policy × bfloat16, float16 × entry cholesky): "
        "passed in A; not applicable in B (removed in torch 2.14, running 2.14.1)",
    ]
    code, out, _ = run_cli(capsys, "-v", a, b)
    assert len([line for line in out.splitlines() if line.startswith("  availability")]) == 4
    d = drift.compare(drift.load(a), drift.load(b))
    (line,) = drift.lines(d.changes)
    assert len(line.changes) == 4


def test_a_reason_change_of_a_not_applicable_item(tmp_path):
    first, second = base_results(), base_results()
    second[2] = dict(second[2], message="not applicable: entry rms_norm is listed for float16 only")
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.11.0", first))),
                      drift.load(write(tmp_path, "b.json", report("2.11.0", second))))
    (change,) = d.changes
    assert change.kind == "message"
    assert change.explanation == ("not applicable in both, for another reason: 'needs torch >= 2.12, "
                                  "running {torch}' -> 'entry rms_norm is listed for float16 only'")


def test_items_in_one_report_only(tmp_path):
    later = base_results()[1:] + [policy("vdot", "torch.vdot", "float32",
                                         category="torch_need_autocast_promote")]
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.13.0", base_results()))),
                      drift.load(write(tmp_path, "b.json", report("2.14.1", later))))
    explained = {(c.group, c.kind): c.explanation for c in d.changes}
    assert explained == {
        ("torch.mm", "availability"): "only in A (passed); B does not generate it",
        ("torch.vdot", "availability"): "only in B (passed); A does not generate it",
    }


def test_outcome_and_message_changes_of_a_device_generic_check(tmp_path, capsys):
    later = base_results()
    later[3] = dict(later[3], outcome="failed", message="ValueError not raised\nmore detail")
    later[4] = dict(later[4], message="no recorded wording of 'invalid_device' (changed)")
    a = write(tmp_path, "a.json", report("2.13.0", base_results()))
    b = write(tmp_path, "b.json", report("2.13.0", later))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 1
    assert "[errors]" in out.splitlines()
    assert ("  outcome       test_errors.py::test_non_string_device_type: passed -> failed: "
            "ValueError not raised") in out
    assert ("  message       test_errors.py::test_invalid_device_string: skipped: "
            "\"no recorded wording of 'invalid_device' for torch 2.11.0\" -> "
            "\"no recorded wording of 'invalid_device' (changed)\"") in out


def test_groups_list_ops_before_device_generic_checks(tmp_path):
    later = copy.deepcopy(base_results())
    for r in later:
        r["outcome"], r["message"] = "failed", "x"
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.13.0", base_results()))),
                      drift.load(write(tmp_path, "b.json", report("2.13.0", later))))
    assert list(d.groups()) == ["torch.mm", "torch.rms_norm", "[errors]"]


def test_memory_addresses_are_not_drift(tmp_path):
    first, second = base_results(), base_results()
    first[3] = dict(first[3], outcome="failed", message="object at 0x7f3a2b1c0d90")
    second[3] = dict(second[3], outcome="failed", message="object at 0x7f99aa000010")
    d = drift.compare(drift.load(write(tmp_path, "a.json", report("2.13.0", first))),
                      drift.load(write(tmp_path, "b.json", report("2.13.0", second))))
    assert d.identical


def test_settings_differences_are_noted(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("2.13.0", base_results()))
    b = write(tmp_path, "b.json", dict(report("2.13.0", base_results()), numerics="close"))
    code, out, _ = run_cli(capsys, a, b)
    assert code == 0
    assert "note: numerics differs: 'bitwise' in A, 'close' in B" in out


def test_markdown_and_json_formats(tmp_path, capsys):
    later = base_results()
    later[0] = policy("mm", "torch.mm", "float32", outcome="failed", message="a|b")
    later[3] = dict(later[3], outcome="failed", message="x|y")
    a = write(tmp_path, "a.json", report("2.13.0", base_results()))
    b = write(tmp_path, "b.json", report("2.14.1", later))
    code, out, _ = run_cli(capsys, "--format", "markdown", a, b)
    assert code == 1
    assert out.startswith("### Drift: torch 2.13.0 → torch 2.14.1 (cpu)\n")
    assert "| `torch.mm` | policy | test_policy[bfloat16-torch_16-mm] | Tensor.mm bfloat16 -> float32" in out
    assert "passed -> failed: x\\|y |" in out  # a pipe in a message does not split the row
    code, out, _ = run_cli(capsys, "--format", "json", a, b)
    data = json.loads(out)
    assert code == 1 and data["identical"] is False
    assert data["groups"][0]["group"] == "torch.mm"
    assert data["groups"][0]["changes"][0]["kind"] == "policy"


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"),
    ("{", "not a JSON file"),
    (json.dumps({"schema": "something/2"}), "not a conformance report"),
    (json.dumps({"schema": drift.SCHEMA, "results": {}}), "'results' must be a list"),
])
def test_unreadable_report_exit_2(tmp_path, capsys, content, problem):
    good = write(tmp_path, "good.json", report("2.13.0", base_results()))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content, encoding="utf-8")
    code, out, err = run_cli(capsys, good, str(bad))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {bad}: ") and problem in err and err.count("\n") == 1


def test_duplicate_items_are_rejected(tmp_path):
    results = base_results()
    results.append(copy.deepcopy(results[0]))
    with pytest.raises(drift.ReportError, match="two results for"):
        drift.load(write(tmp_path, "a.json", report("2.13.0", results)))
