"""The figures README.md and docs/ print from runs, and where each one comes from.

    python -m amp_conformance.tools.figures --write     # the pages from docs/data's records
    python -m amp_conformance.tools.figures --check     # what differs, and unnamed figures

A figure is a count (``N passed``, ``N causes``, ``C/T covered``), a time (``N s``,
``N minutes``) or a size a page quotes from a run. Each has one source:

- a record in docs/data written by the run itself: a guide walk
  (:mod:`amp_conformance.tools.guide_walk`: docs/data/vendor-guide.json,
  docs/data/quickstart.json) or a benchmark (``benchmarks/suite_speed.py --record``:
  docs/data/suite-speed.json). :data:`FIGURES` holds each phrase of a page that quotes one,
  with ``{placeholders}`` that :func:`vendor_values` (...) fill from the record the page
  quotes (the file's first); the suite-speed table is a generated section. ``--write`` puts
  the records' values into the pages; tests/test_figures.py holds the pages to them;
- a generated section of its own generator (:data:`GENERATED`: the vendors, wrappers,
  versions and GPU-check tables, the atlas), which its own test holds to its data;
- docs/data/figure-sources.toml: a figure of a run that left no record here (a GPU check, an
  earlier measurement) names the commit that added it to the page and reports the run, and
  a figure checked by a test names that test; what looks like a run's figure but is not
  (a default, an example) says what it is.

:func:`unnamed` finds each figure of a page that none of these names.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from amp_conformance.core import generated
from amp_conformance.tools import guide_walk

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
SOURCES = DATA / "figure-sources.toml"
PAGES = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
#: what a run's figure looks like: a count of outcomes or causes, a coverage line, a time
RUN_FIGURE = re.compile(
    r"(?<![\w.\-/])\d+(?:\.\d+)?(?: ?(?:s|ms|min)\b| (?:minutes?|seconds|hours?|passed|failed|"
    r"skipped|xfailed|xpassed|errors?|causes?|failures?|warnings|items)\b|/\d+ covered)")
#: generated sections: (page, begin, end, the generator that a project test holds them to)
GENERATED = (
    ("docs/vendors.md", "<!-- vendors-table:begin -->", "<!-- vendors-table:end -->",
     "amp_conformance.tools.vendors_table (tests/test_vendors_table.py)"),
    ("docs/wrappers.md", "<!-- wrappers-table:begin -->", "<!-- wrappers-table:end -->",
     "amp_conformance.tools.wrappers_table (tests/test_wrappers_table.py)"),
    ("docs/versions.md", "<!-- generated from reports/", "<!-- end of the generated matrix -->",
     "amp_conformance.tools.matrix (tests/test_versions_matrix.py)"),
    ("docs/gpu.md", "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->",
     "benchmarks/gpu_check.py --publish (tests/test_gpu_check.py)"),
    ("docs/atlas.md", "# ", "\0", "amp_conformance.tools.atlas (tests/test_atlas.py)"),
    ("docs/performance.md", "<!-- suite-speed:begin -->", "<!-- suite-speed:end -->",
     "amp_conformance.tools.figures from docs/data/suite-speed.json (tests/test_figures.py)"),
)
SPEED_BEGIN, SPEED_END = GENERATED[-1][1], GENERATED[-1][2]


@dataclass(frozen=True)
class Figure:
    """A phrase of ``page`` that quotes a run: ``template``'s ``{placeholders}`` are the
    values ``values`` reads from the first record of ``source`` (a file of docs/data)."""

    page: str
    template: str
    source: str
    values: Callable[[dict], dict[str, str]]


def records(source: str) -> list[dict]:
    return json.loads((DATA / source).read_text(encoding="utf-8"))["records"]


def _step(record: dict, start: str, has: str = "") -> dict:
    for step in record["steps"]:
        if step["command"].startswith(start) and has in step["command"]:
            return step
    raise KeyError(f"no step {start!r}{f' with {has!r}' if has else ''} in the record")


def _seconds(step: dict) -> str:
    return str(max(1, round(step["seconds"])))


def _numbers(pattern: str, text: str, names: tuple[str, ...]) -> dict[str, str]:
    found = re.search(pattern, text)
    if found is None:
        raise KeyError(f"the record has no line like {pattern!r}")
    return dict(zip(names, found.groups(), strict=True))


def _counts(line: str, prefix: str) -> dict[str, str]:
    """``{prefix.passed: "1245", ...}`` of a pytest summary line."""
    words = re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)", line)
    return {f"{prefix}.{word}": n for n, word in words}


def _last_summary(output: str) -> str:
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", output, re.M)
    if not found:
        raise KeyError("the record's step has no pytest summary line")
    return found[-1]


def vendor_values(record: dict) -> dict[str, str]:
    """The vendor guide's figures from its walk's record."""
    return {"machine": guide_walk.describe(record["machine"]), "commit": record["commit"],
            **vendor_review_values(record),
            **vendor_run_values(record)}


def vendor_review_values(record: dict) -> dict[str, str]:
    """What discover, review and coverage print (steps 2 to 4), and their times."""
    values = {}
    discover = _step(record, "python -m amp_conformance discover")
    values |= _numbers(r"discover: (\d+) entries of the cuda lists on mydev: (\d+) same, (\d+) "
                       r"differ, (\d+) not run", discover["output"],
                       ("discover.entries", "discover.same", "discover.differ", "discover.not_run"))
    listing = next(s for s in record["steps"] if s["command"] == "python -m amp_conformance "
                   "review mydev.toml")["output"]
    line = re.search(r"review: (\d+) entries of mydev.toml left to decide, in (\d+) groups: "
                     r"(.*?); a failure if accepted: (\d+)", listing)
    if line is None:
        raise KeyError("the record's review has no summary line")
    values |= {"review.left": line[1], "review.groups": line[2], "review.refused": line[4]}
    values |= {f"group.{k}": n for k, n in re.findall(r"(\S+) \((\d+)\)", line[3])}
    keep = _step(record, "python -m amp_conformance review", "--keep")["output"]
    values |= _numbers(r"accepted (\d+), kept (\d+), (\d+) left to review", keep,
                       ("keep.accepted", "keep.kept", "keep.left"))
    values |= _numbers(r"review: (\d+) expected failures of the kept entries", keep,
                       ("keep.xfails",))
    accept = _step(record, "python -m amp_conformance review", "--accept")["output"]
    values |= _numbers(r"accepted (\d+), kept (\d+), (\d+) left to review", accept,
                       ("accept.accepted", "accept.kept", "accept.left"))
    coverage = _step(record, "python -m amp_conformance coverage")
    values |= _numbers(r"coverage mydev: (\d+)/(\d+) covered, (\d+) reached but not checked, "
                       r"(\d+) excluded, (\d+) missing", coverage["output"],
                       ("cov.covered", "cov.total", "cov.reached", "cov.excluded", "cov.missing"))
    return values | {"t.discover": _seconds(discover), "t.coverage": _seconds(coverage)}


def vendor_run_values(record: dict) -> dict[str, str]:
    """The first and the declared run: their summaries, times, causes, and what the guide
    counts among the first run's failures and expected failures."""
    first = _step(record, "python -m amp_conformance run --report reports/draft.json")
    declared = _step(record, "python -m amp_conformance run --report reports/mydev.json")
    values = {"t.first": _seconds(first), "t.declared": _seconds(declared),
              "declared.rc": str(declared["rc"])}
    values |= _counts(_last_summary(first["output"]), "first")
    values |= _counts(_last_summary(declared["output"]), "declared")
    values |= _numbers(r"(\d+) failures in (\d+) causes", first["output"],
                       ("first.failures", "first.causes"))
    failed = record["reports"]["draft"]["failed"]
    kept = ("conv2d]", "scaled_dot_product_attention]")
    parts = {"cache": [f for f in failed if f.startswith("test_cast_cache.py")],
             "kept": [f for f in failed if f.startswith("test_oplist.py") and f.endswith(kept)],
             "poisson": [f for f in failed if "poisson_nll_loss" in f],
             "transforms": [f for f in failed if f.startswith("test_transforms.py")],
             "modules": [f for f in failed if f.startswith("test_modules.py")]}
    told = sum(len(v) for v in parts.values())
    if told != len(failed):
        raise KeyError(f"the guide tells {told} of the first run's {len(failed)} failures")
    values |= {f"c.{k}": str(len(v)) for k, v in parts.items()}
    values |= _numbers(r"limits of mydev: it has no sparse layout \((\d+) items\)",
                       first["output"], ("c.sparse",))
    drafted = tomllib.loads(record["drafted"]["capabilities.toml"] or "")
    values["drafted"] = ", ".join(f"`{k} = {str(v).lower()}`"
                                  for k, v in drafted.get("capabilities", {}).items())
    where = [w for _, w in record["reports"]["draft"]["xfailed"]]
    values |= {"c.kept_xfail": str(where.count("mydev-xfail.txt")),
               "c.defects": str(where.count("suite"))}
    return values


def quickstart_values(record: dict) -> dict[str, str]:
    """The quickstart's (and README's) figures from its walk's record: the installs and
    the test command (the shipped suite's own times are the benchmark's: speed_values)."""
    torch_step = _step(record, "pip install torch")
    suite_step = _step(record, "pip install -e")
    tests = _step(record, "pytest -n 2")
    return {"machine": guide_walk.describe(record["machine"]), "commit": record["commit"],
            "t.torch": _seconds(torch_step), "t.suite": _seconds(suite_step),
            "t.tests": str(max(1, round(tests["seconds"] / 60)))}


def speed_values(record: dict) -> dict[str, str]:
    """The shipped suite's times and counts, serial and ``-n 2``, from the benchmark's
    record (one source for every page that says how long the suite takes)."""
    row = re.compile(r"(serial|-n 2)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+(.*)")
    rows = {found[1]: found.groups() for found in map(row.match, record["output"]) if found}
    if set(rows) != {"serial", "-n 2"}:
        raise KeyError("the benchmark's record has no serial and -n 2 rows")
    serial, xdist = rows["serial"], rows["-n 2"]
    return {"speed.machine": guide_walk.describe(record["machine"]),
            "speed.items": serial[1], "t.serial": str(round(float(serial[2]))),
            "t.xdist": str(round(float(xdist[2]))), **_counts(serial[3], "suite")}


VENDOR = "vendor-guide.json"
QUICK = "quickstart.json"
SPEED = "suite-speed.json"


def speed_markdown(data: list[dict]) -> str:
    """docs/performance.md's generated table: each recorded benchmark, as it printed."""
    out = []
    for rec in data:
        out += [f"`{rec['command']}` on {guide_walk.describe(rec['machine'])} "
                f"(commit {rec['commit']}, {rec['date']}):", "", "```text", *rec["output"],
                "```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


# -- templates ------------------------------------------------------------------------


def _pattern(template: str, values: dict[str, str]) -> tuple[re.Pattern, list[str]]:
    """A template as a regex (whitespace as any whitespace, each placeholder a group) and
    the placeholders in order."""
    keys, parts, pos = [], [], 0
    for found in re.finditer(r"\{([^{}\s]+)\}", template):
        parts.append(_literal(template[pos:found.start()]))
        key = found.group(1)
        value = str(values.get(key, "0"))
        number = re.fullmatch(r"\d+(?:\.\d+)?", value)
        # a words' value: itself first (it may hold what follows it, a dot), else any words;
        # a number's, else one word (a commit of digits alone replacing one with letters)
        parts.append(r"(\d+(?:\.\d+)?|\w+)" if number else rf"({_literal(value)}|.+?)")
        keys.append(key)
        pos = found.end()
    parts.append(_literal(template[pos:]))
    if template.endswith("}.") and parts[-2].endswith("|.+?)"):
        parts[-1] = r"\.(?=\s|$)"  # a sentence's end, not a dot inside the words
    return re.compile("".join(parts), re.S), keys


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(w) for w in re.split(r"\s+", text)) if text.strip() else (
        r"\s+" if text else "")


def check(figure: Figure, text: str, values: dict[str, str]) -> list[str]:
    """What of ``figure`` differs between the page's ``text`` and the record's ``values``."""
    pattern, keys = _pattern(figure.template, values)
    found = pattern.search(text)
    if found is None:
        return [f"{figure.page}: no phrase like {figure.template[:90]!r}"]
    missing = [k for k in keys if k not in values]
    if missing:
        return [f"{figure.page}: the record has no {', '.join(missing)}"]
    return [f"{figure.page}: {key} is {found.group(i)} on the page, {values[key]} in "
            f"docs/data/{figure.source}" for i, key in enumerate(keys, 1)
            if re.sub(r"\s+", " ", found.group(i)) != values[key]]


def fill(figure: Figure, text: str, values: dict[str, str]) -> str:
    """``text`` with ``figure``'s placeholders set to ``values``."""
    pattern, keys = _pattern(figure.template, values)
    found = pattern.search(text)
    if found is None:
        raise SystemExit(f"{figure.page}: no phrase like {figure.template[:90]!r}")
    for i in range(len(keys), 0, -1):
        text = text[:found.start(i)] + values[keys[i - 1]] + text[found.end(i):]
    return text


FIGURES = (
    Figure("docs/vendor-guide.md", "What the steps print is what they printed at commit "
           "{commit}, their times those of the example backend on {machine}.", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "to each entry of CUDA's lists ({t.discover} s)", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "that list reaches ({t.coverage} s)", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "declarations drafted from them ({t.first} s)", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "every departure declared ({t.declared} s)", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "`discover: {discover.entries} entries of the cuda lists on "
           "mydev: {discover.same} same, {discover.differ} differ, {discover.not_run} not run; "
           "wrote mydev.toml`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "`review: {review.left} entries of mydev.toml left to "
           "decide, in {review.groups} groups: fp32/unchanged-no-kernel "
           "({group.fp32/unchanged-no-kernel}), lower/unchanged-no-kernel "
           "({group.lower/unchanged-no-kernel}), fp32_opt_dtype/unchanged-no-kernel "
           "({group.fp32_opt_dtype/unchanged-no-kernel}), promote/unchanged-no-kernel "
           "({group.promote/unchanged-no-kernel}), banned/unchanged-no-kernel "
           "({group.banned/unchanged-no-kernel}), fp32/unchanged ({group.fp32/unchanged}), "
           "lower/unchanged-values-differ ({group.lower/unchanged-values-differ}); a failure if "
           "accepted: {review.refused} (lower/unchanged-values-differ)`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "`review: accepted {keep.accepted}, kept {keep.kept}, "
           "{keep.left} left to review` and `review: {keep.xfails} expected failures of the kept "
           "entries added to mydev-xfail.txt`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "the accept, `review: accepted {accept.accepted}, kept "
           "{accept.kept}, {accept.left} left to review`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "`coverage mydev: {cov.covered}/{cov.total} covered, "
           "{cov.reached} reached but not checked, {cov.excluded} excluded, {cov.missing} "
           "missing`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "ends `{first.failed} failed, {first.passed} passed, "
           "{first.skipped} skipped, {first.xfailed} xfailed` ({t.first} s), `{first.failures} "
           "failures in {first.causes} causes`: {c.cache} cast-cache checks", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "`limits of mydev: it has no sparse layout ({c.sparse} "
           "items)`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "limit a probe showed, with the probe's finding "
           "({drafted})", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "`scaled_dot_product_attention` ({c.kept}; their policy "
           "items are the {c.kept_xfail} of `mydev-xfail.txt` among the xfailed, beside the "
           "suite's {c.defects} recorded PyTorch defects); {c.poisson} numerics items of "
           "`poisson_nll_loss`", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "and {c.transforms} `torch.func` transform items", VENDOR,
           vendor_values),
    Figure("docs/vendor-guide.md", "are excused as transform limits, counted on the run's "
           "`items excused` line; and {c.modules} module items", VENDOR, vendor_values),
    Figure("docs/vendor-guide.md", "The declared run: `{declared.passed} passed, "
           "{declared.skipped} skipped, {declared.xfailed} xfailed`, exit {declared.rc} "
           "({t.declared} s)", VENDOR, vendor_values),
    *(Figure(page, "On {machine}, in a fresh virtualenv in a fresh clone: {t.torch} s to "
             "install torch", QUICK, quickstart_values) for page in ("README.md",
                                                                    "docs/quickstart.md")),
    *(Figure(page, "{t.suite} s for the suite and its dependencies, and **about {t.tests} "
             "minutes** for the test command", QUICK, quickstart_values)
      for page in ("README.md", "docs/quickstart.md")),
    *(Figure(page, "(about {t.serial} s serial, {t.xdist} s with `-n 2` on "
             "{speed.machine}: {suite.passed} passed, {suite.skipped} skipped, {suite.xfailed} "
             "xfailed", SPEED, speed_values) for page in ("README.md", "docs/quickstart.md")),
    Figure("docs/quickstart.md", "`python -m amp_conformance.tools.guide_walk quickstart` "
           "recorded these figures at commit {commit} (docs/data/quickstart.json)", QUICK,
           quickstart_values),
)

#: text blocks a page shows as a run printed them: (page, the block's first line, record
#: file, the step's command)
QUOTES = (
    ("docs/vendor-guide.md", "[lower/unchanged-no-kernel]", VENDOR,
     "python -m amp_conformance review mydev.toml"),
)


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def quoted_block(text: str, first_line: str) -> str | None:
    """The fenced block of ``text`` whose first line starts with ``first_line``."""
    for body in re.findall(r"```\w*\n(.*?)```", text, re.S):
        if body.lstrip().startswith(first_line):
            return body
    return None


@functools.cache
def page_values(source: str, values: Callable[[dict], dict[str, str]]) -> dict[str, str]:
    """The figures of the record the pages quote (``source``'s first)."""
    return values(records(source)[0])


def problems(root: Path = ROOT) -> list[str]:
    """Where a page differs from the records it quotes."""
    found = []
    for figure in FIGURES:
        found += check(figure, (root / figure.page).read_text(encoding="utf-8"),
                       page_values(figure.source, figure.values))
    for page, first, source, command in QUOTES:
        block = quoted_block((root / page).read_text(encoding="utf-8"), first)
        step = next(s for s in records(source)[0]["steps"] if s["command"] == command)
        if block is None or _squash(block) not in _squash(step["output"]):
            found.append(f"{page}: the block {first!r} is not what `{command}` printed "
                         f"(docs/data/{source})")
    speed = generated.section((root / "docs/performance.md").read_text(encoding="utf-8"),
                              SPEED_BEGIN, SPEED_END)
    if speed != speed_markdown(records("suite-speed.json")):
        found.append("docs/performance.md: the suite-speed table is not docs/data/suite-speed.json")
    return found


def write(root: Path = ROOT) -> list[str]:
    """Put the records' figures into the pages; the pages changed."""
    changed = []
    for page in sorted({f.page for f in FIGURES}):
        path = root / page
        text = before = path.read_text(encoding="utf-8")
        for figure in (f for f in FIGURES if f.page == page):
            text = fill(figure, text, figure.values(records(figure.source)[0]))
        if text != before:
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    if generated.write(root / "docs/performance.md", SPEED_BEGIN, SPEED_END,
                       speed_markdown(records("suite-speed.json")).rstrip("\n")):
        changed.append("docs/performance.md")
    return changed


# -- figures no record holds ------------------------------------------------------------


def sources(path: Path = SOURCES) -> list[dict]:
    """docs/data/figure-sources.toml's entries: ``page``, ``text`` and one of ``commit``,
    ``test`` or ``not_a_run``."""
    return tomllib.loads(path.read_text(encoding="utf-8"))["figure"]


def _spans(text: str, phrase: str) -> list[tuple[int, int]]:
    """Where ``phrase`` (any whitespace as any whitespace) stands in ``text``."""
    return [m.span() for m in re.finditer(_literal(phrase), text)]


def named_spans(page: str, text: str) -> list[tuple[int, int]]:
    """The parts of a page whose figures have a named source."""
    spans = []
    for name, begin, end, _ in GENERATED:
        if name == page:
            start = text.find(begin)
            stop = len(text) if end == "\0" else text.find(end)
            if 0 <= start <= stop:
                spans.append((start, stop))
    for figure in FIGURES:
        if figure.page == page:
            values = page_values(figure.source, figure.values)
            found = _pattern(figure.template, values)[0].search(text)
            spans += [found.span()] if found else []
    for quoted_page, first, _, _ in QUOTES:
        block = quoted_block(text, first) if quoted_page == page else None
        spans += [(text.index(block), text.index(block) + len(block))] if block else []
    for entry in sources():
        if entry["page"] == page:
            spans += _spans(text, entry["text"])
    return spans


def unnamed(page: str, root: Path = ROOT) -> list[str]:
    """``page:line: figure`` of each run-looking figure of ``page`` no source names."""
    text = (root / page).read_text(encoding="utf-8")
    spans = named_spans(page, text)
    return [f"{page}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for m in RUN_FIGURE.finditer(text)
            if not any(a <= m.start() and m.end() <= b for a, b in spans)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_conformance.tools.figures",
                                     description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="the pages from the records")
    action.add_argument("--check", action="store_true", help="what differs, what is unnamed")
    args = parser.parse_args(argv)
    if args.write:
        for page in write():
            print(f"figures: wrote {page}")
        return 0
    found = problems() + [u for page in PAGES for u in unnamed(page)]
    print("\n".join(found) or "figures: every figure has its source, and the pages agree")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
