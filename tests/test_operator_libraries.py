"""An operator library's autocast kernels are checkable: an op list names its ops
(``library::op``, ``[list] imports``), the per-entry checks hold each to its registered rule,
and ``coverage`` counts the library's kernels as policy once a list names it (foreign until
then). tests/backends/amp_oplib.py is the library (``torch.library.custom_op`` and
``register_autocast``); amp_oplib_broken.py plants broken rules its own list must catch."""

from __future__ import annotations

import sys

import pytest

from amp_conformance.schema.oplist import OpListError, parse_file, variants
from tests import backends

OPLIST = backends.HERE / "amp_oplib.toml"
HEADER = '[list]\ndevice = "cpu"\nimports = ["amp_oplib"]\n'


@pytest.fixture
def library_path(monkeypatch):
    monkeypatch.syspath_prepend(str(backends.HERE))
    yield
    for name in ("amp_oplib", "amp_oplib_ops"):  # the ops stay defined: torch keeps them
        sys.modules.pop(name, None)


def _write(tmp_path, body, header=HEADER):
    path = tmp_path / "lib.toml"
    path.write_text(header + body)
    return path


def test_an_op_named_with_its_library_is_called_through_torch_ops(library_path):
    entries = {e.id: e for e in parse_file(OPLIST).entries}
    entry = entries["amplib-scaled_mm"]
    assert (entry.op, entry.namespace, entry.library) == ("scaled_mm", "torch.ops.amplib", "amplib")
    assert [name for name, _ in variants(entry)] == ["torch.ops.amplib.scaled_mm"]
    assert entries["amplib-exp_sum"].expect == "first"


@pytest.mark.parametrize("header, body, field, words", [
    (HEADER, '[[entry]]\nid = "x"\nop = "amplib::scaled_mm"\ncategory = "torch_16"\n'
             'namespace = "torch"\n', "namespace", "names its library"),
    ('[list]\ndevice = "cpu"\nimports = ["no_such_library_here"]\n', "", "list.imports",
     "cannot import no_such_library_here: ModuleNotFoundError"),
    ('[list]\ndevice = "cpu"\nimports = "amp_oplib"\n', "", "list.imports",
     "expected a list of module names"),
    (HEADER, '[[entry]]\nid = "x"\nop = "amplib::no_such_op"\ncategory = "torch_16"\n', "op",
     "torch.ops.amplib.no_such_op does not exist"),
])
def test_a_library_op_or_import_that_cannot_be_had_names_file_and_field(
        tmp_path, library_path, header, body, field, words):
    path = _write(tmp_path, body, header)
    with pytest.raises(OpListError) as info:
        parse_file(path)
    assert str(path) in str(info.value) and field in str(info.value) and words in str(info.value)


def _suite(tmp_path, *extra: str):
    return backends.run("-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
                        "--oplist", str(OPLIST), "-q", "-p", "no:cacheprovider", "--tb=no",
                        "-k", "amplib", *extra, cwd=tmp_path)


def test_the_library_is_held_to_its_registered_rules(tmp_path):
    sound = _suite(tmp_path)
    assert sound.returncode == 0 and "28 passed, 2 skipped" in sound.stdout, sound.stdout[-2000:]
    broken = _suite(tmp_path, "--backend-module", "amp_oplib_broken", "-rf")
    # "FAILED <nodeid> - <message>": the message may hold brackets, and how much of it
    # shows depends on the terminal's width
    failed = {line.split()[1].split("::")[-1]
              for line in broken.stdout.splitlines() if line.startswith("FAILED ")}
    assert broken.returncode == 1, broken.stdout[-2000:]
    for dtype in ("float16", "bfloat16"):  # float16 where bfloat16 is its rule; no fp32 rule
        assert f"test_policy[cpu-{dtype}-torch_16-amplib-scaled_mm]" in failed, failed
        assert f"test_policy[cpu-{dtype}-torch_fp32-amplib-unit_norm]" in failed, failed
    # no kernel that computes in float32 and casts back: its values are bfloat16's own
    assert "test_numerics[cpu-bfloat16-torch_fp32-amplib-exp_sum]" in failed, failed


def test_coverage_counts_a_named_library_and_calls_it_foreign_until_then(tmp_path):
    named = backends.run("-m", "amp_conformance", "coverage", "--device", "cpu", "--oplist",
                         str(OPLIST), "-q", cwd=tmp_path)
    assert named.returncode == 0, named.stdout[-2000:] + named.stderr[-2000:]
    assert named.stdout.strip().splitlines()[-1].endswith("0 missing (amplib 3/3 covered)")
    unnamed = backends.run("-m", "amp_conformance", "coverage", "--device", "cpu",
                           "--backend-module", "amp_oplib", cwd=tmp_path)
    assert "3 foreign (not checkable)" in unnamed.stdout.strip().splitlines()[-1]
    assert "an op of library 'amplib', which no op list names" in unnamed.stdout


def test_discover_runs_a_library_list_and_drafts_the_kernels_no_list_names(tmp_path, library_path):
    """``discover --oplist`` observes a library's entries and writes them with its imports
    (the written list passes the suite); without it, each library kernel is a commented
    draft with its schema, and the summary says how many."""
    common = ("-m", "amp_conformance", "discover", "--device", "cpu", "--reference", "cpu", "-q")
    done = backends.run(*common, "--oplist", str(OPLIST), "--out", "lib.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no list names" not in done.stdout
    text = (tmp_path / "lib.toml").read_text()
    assert 'imports = ["amp_oplib"]' in text and f"--oplist {OPLIST}" in text
    written = {e.id: e for e in parse_file(tmp_path / "lib.toml").entries}
    assert written["amplib-exp_sum"].expect == "first"  # as listed: dtypes alone read "unchanged"
    assert written["amplib-scaled_mm"].library == "amplib"
    passed = backends.run("-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
                          "--oplist", "lib.toml", "-q", "-p", "no:cacheprovider", "-k", "amplib",
                          cwd=tmp_path)
    assert passed.returncode == 0 and "28 passed, 2 skipped" in passed.stdout, passed.stdout[-2000:]

    drafted = backends.run(*common, "--backend-module", "amp_oplib", "--out", "cpu.toml",
                           cwd=tmp_path)
    assert drafted.returncode == 0, drafted.stdout[-2000:] + drafted.stderr[-2000:]
    assert "; 3 Autocast kernels of amplib that no list names, drafted (commented)" in \
        drafted.stdout
    text = (tmp_path / "cpu.toml").read_text()
    assert '# op = "amplib::unit_norm"' in text
    assert "# args = []  # amplib::unit_norm(Tensor x) -> Tensor" in text
    assert all(e.library != "amplib" for e in parse_file(tmp_path / "cpu.toml").entries)
