"""An operator library's autocast kernels are checkable: an op list names its ops
(``library::op``, ``[list] imports``), the per-entry checks hold each to its registered rule,
and ``coverage`` counts the library's kernels as policy once a list names it (foreign until
then). tests/backends/amp_oplib.py is the library (``torch.library.custom_op`` and
``register_autocast``); amp_oplib_broken.py plants broken rules its own list must catch."""

from __future__ import annotations

import json

import pytest

from tests import backends

OPLIST = backends.HERE / "amp_oplib.toml"
HEADER = '[list]\ndevice = "cpu"\nimports = ["amp_oplib"]\n'


#: parses op lists in a child process: importing the library registers its kernels with
#: torch for good, which in this process would make them foreign to every later coverage test
_PARSE = """
import json, sys
import amp_conformance.checks.registry
from amp_conformance.schema.oplist import OpListError, parse_file, variants
for path in sys.argv[1:]:
    try:
        entries = parse_file(path).entries
    except OpListError as exc:
        print(json.dumps({"error": str(exc)}))
        continue
    print(json.dumps({e.id: {"op": e.op, "namespace": e.namespace, "library": e.library,
                             "expect": e.expect, "variants": [n for n, _ in variants(e)]}
                      for e in entries}))
"""


def _parsed(*paths) -> list[dict]:
    """The entries of each list at ``paths`` (or the loader's error, under "error"), in
    order, parsed by one child."""
    done = backends.run("-c", _PARSE, *map(str, paths))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()[-len(paths):]]


def _write(tmp_path, body, header=HEADER):
    path = tmp_path / "lib.toml"
    path.write_text(header + body)
    return path


#: lists whose library op or import cannot be had: (header, body, the field and the words
#: their error names)
UNHAD = [
    (HEADER, '[[entry]]\nid = "x"\nop = "amplib::scaled_mm"\ncategory = "torch_16"\n'
             'namespace = "torch"\n', "namespace", "names its library"),
    ('[list]\ndevice = "cpu"\nimports = ["no_such_library_here"]\n', "", "list.imports",
     "cannot import no_such_library_here: ModuleNotFoundError"),
    ('[list]\ndevice = "cpu"\nimports = "amp_oplib"\n', "", "list.imports",
     "expected a list of module names"),
    (HEADER, '[[entry]]\nid = "x"\nop = "amplib::no_such_op"\ncategory = "torch_16"\n', "op",
     "torch.ops.amplib.no_such_op does not exist"),
]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    """OPLIST and each list of UNHAD (by its header and body, in a folder of its own),
    parsed by one child: what each test of :class:`TestParsedLists` reads."""
    paths = [OPLIST]
    for i, (header, body, _, _) in enumerate(UNHAD):
        paths.append(_write(tmp_path_factory.mktemp(f"unhad{i}"), body, header))
    results = _parsed(*paths)
    return {"oplist": results[0],
            **{(h, b): (path, result) for (h, b, _, _), path, result in
               zip(UNHAD, paths[1:], results[1:], strict=True)}}


class TestParsedLists:
    """Op lists the loader reads (or refuses), parsed by one child (:func:`parsed`)."""

    def test_an_op_named_with_its_library_is_called_through_torch_ops(self, parsed):
        entries = parsed["oplist"]
        entry = entries["amplib-scaled_mm"]
        assert (entry["op"], entry["namespace"], entry["library"]) == \
            ("scaled_mm", "torch.ops.amplib", "amplib")
        assert entry["variants"] == ["torch.ops.amplib.scaled_mm"]
        assert entries["amplib-exp_sum"]["expect"] == "first"

    @pytest.mark.parametrize("header, body, field, words", UNHAD)
    def test_a_library_op_or_import_that_cannot_be_had_names_file_and_field(
            self, parsed, header, body, field, words):
        path, result = parsed[(header, body)]
        error = result["error"]
        assert str(path) in error and field in error and words in error


def _suite(tmp_path, *extra: str):
    return backends.run("-m", "pytest", "--pyargs", "amp_conformance", "--device", "cpu",
                        "--oplist", str(OPLIST), "-q", "-p", "no:cacheprovider", "--tb=no",
                        "-k", "amplib", *extra, cwd=tmp_path)


@pytest.mark.slow
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


@pytest.mark.slow
def test_coverage_counts_a_named_library_and_calls_it_foreign_until_then(tmp_path):
    named = backends.run("-m", "amp_conformance", "coverage", "--device", "cpu", "--oplist",
                         str(OPLIST), "-q", cwd=tmp_path)
    assert named.returncode == 0, named.stdout[-2000:] + named.stderr[-2000:]
    assert named.stdout.strip().splitlines()[-1].endswith("0 missing (amplib 3/3 covered)")
    unnamed = backends.run("-m", "amp_conformance", "coverage", "--device", "cpu",
                           "--backend-module", "amp_oplib", cwd=tmp_path)
    assert "3 foreign (not checkable)" in unnamed.stdout.strip().splitlines()[-1]
    assert "an op of library 'amplib', which no op list names" in unnamed.stdout


@pytest.mark.slow
def test_discover_runs_a_library_list_and_drafts_the_kernels_no_list_names(tmp_path):
    """``discover --oplist`` observes a library's entries and writes them with its imports
    (the written list passes the suite); without it, each library kernel is a commented
    draft with its schema, and the summary says how many."""
    common = ("-m", "amp_conformance", "discover", "--device", "cpu", "--reference", "cpu", "-q")
    done = backends.run(*common, "--oplist", str(OPLIST), "--out", "lib.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no list names" not in done.stdout
    text = (tmp_path / "lib.toml").read_text()
    assert 'imports = ["amp_oplib"]' in text and f"--oplist {OPLIST}" in text
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
    written, drafted_list = _parsed(tmp_path / "lib.toml", tmp_path / "cpu.toml")
    assert written["amplib-exp_sum"]["expect"] == "first"  # as listed: "unchanged" by dtypes
    assert written["amplib-scaled_mm"]["library"] == "amplib"
    assert all(e["library"] != "amplib" for e in drafted_list.values())
