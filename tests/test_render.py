"""The HTML and Markdown reports (plugin/report/render.py) open on the verdict and the
results; what did not apply comes after them, folded where nothing failed."""

from __future__ import annotations

from amp_conformance.plugin.report import banner, causes, render
from amp_conformance.plugin.report import journal as report

SUMMARY = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "xpassed": 0, "error": 0,
           "not_applicable": 0, "unfinished": 0, "quarantined": 0}


def _report(results: list[dict], **run: object) -> dict:
    summary = dict(SUMMARY)
    for r in results:
        summary[r["outcome"]] += 1
    return {"schema": report.SCHEMA, "torch": "2.13.0", "python": "3.11", "device": "cpu",
            "fake": False, "amp_dtypes": ["bfloat16"], "numerics": "bitwise", "options": {},
            "categories": {}, "results": results, "summary": summary,
            "causes": causes.of_results(results),
            "run": {"status": "completed", "executed": summary["passed"] + summary["failed"],
                    **run}}


def _item(n: int, outcome: str, message: str | None = None) -> dict:
    return {"nodeid": f"s/test_x.py::test_x[{n}]", "test": "test_x", "check": "regions",
            "param": str(n), "amp_dtype": "bfloat16", "category": None, "entry": None,
            "op": None, "outcome": outcome, "message": message, "observed": None, "defect": None}


GREEN = _report([_item(1, "passed"), _item(2, "skipped", "not applicable: no cuda"),
                 _item(3, "xfailed", "known [x.txt:1]")])
RED = _report([_item(1, "failed", "AssertionError: lost"), _item(2, "skipped", "n/a: x"),
               _item(3, "passed")])


def test_a_green_run_opens_on_its_verdict_and_folds_its_skips():
    page = render.render_html(GREEN)
    verdict = page.index('class="verdict ok"')
    assert "CONFORMS: every executed check on cpu passed (1 passed, 1 expected failures " \
           "declared for the device, 1 skipped)." in page
    assert verdict < page.index('class="cards"') < page.index('id="families"')
    skips = page.index("id='skips-by-cause'")
    assert page.index('id="defects"') < skips < page.index('id="run"')
    assert "<details><summary>1 skipped items in 1 causes</summary>" in page[skips:]


def test_the_verdict_tells_declared_expected_failures_from_pytorchs_recorded_defects():
    """The user declared one; the suite recorded two of PyTorch's own (a defect, a gap)."""
    data = _report([_item(1, "passed"), _item(2, "xfailed", "mm is slow here [xfail.txt:3]"),
                    _item(3, "xfailed", "known PyTorch defect x (https://x): y"),
                    _item(4, "xfailed", "known torch gap: maia's flag is ignored")])
    assert banner.verdict(data)[1] == (
        "CONFORMS: every executed check on cpu passed (1 passed, 1 expected failures declared "
        "for the device, 2 expected failures that are PyTorch's own recorded defects, "
        "0 skipped).")
    only_pytorch = _report([_item(1, "passed"), _item(3, "xfailed", "known PyTorch defect x")])
    assert "declared" not in banner.verdict(only_pytorch)[1]


def test_a_red_run_leads_with_its_failures_and_shows_its_skips_open():
    page = render.render_html(RED)
    assert "DOES NOT CONFORM: 1 of the executed checks on cpu failed (1 passed)." in page
    assert page.index('class="verdict fail"') < page.index("id='failures-by-cause'") \
        < page.index('id="families"') < page.index("id='skips-by-cause'")
    assert "skipped items in" not in page  # not folded: a red run's skips may explain it
    assert render.render_markdown(RED).splitlines()[2] == (
        "**DOES NOT CONFORM: 1 of the executed checks on cpu failed (1 passed).**")


def test_a_run_that_is_no_verdict_says_so_first():
    stopped = _report([_item(1, "passed")], status="interrupted", interrupted_by="SIGINT")
    assert banner.verdict(stopped) == (False, "NO VERDICT on cpu: INCOMPLETE RUN.")
    partial = _report([_item(1, "passed")], not_run=3)
    conforms, sentence = banner.verdict(partial)
    assert not conforms and sentence.startswith("PARTIAL VERDICT: every executed check on cpu "
                                                "passed, but 3 items not run")


def test_a_familys_skipped_count_says_why():
    data = _report([_item(1, "passed"), _item(2, "skipped", "not applicable: no cuda"),
                    _item(3, "skipped", "not applicable: no cuda"),
                    _item(4, "skipped", "not applicable: needs torch >= 2.14")])
    page = render.render_html(data)
    assert ('<a href="#skips-family-regions" title="not applicable: no cuda">3</a>' in page)
    assert '<details id="skips-family-regions"><summary>regions: 3 skipped, 2 causes' in page
    markdown = render.render_markdown(data)
    assert ("- regions: 3 skipped — 2 × not applicable: no cuda; 1 more causes"
            in markdown.splitlines())


def test_an_excused_item_has_its_own_mark_in_the_grid():
    """A skip an excuse's proof granted is told apart from a skip and from not applicable:
    its own class, mark and legend entry."""
    entry = {"category": "torch_16", "entry": "mm", "op": "mm"}
    excuse = {"mechanism": "limit", "evidence": "the same call fails without autocast"}
    results = [{**_item(1, "skipped", "not applicable: cpu limit: autograd"), **entry,
                "test": "test_backward", "check": "backward", "excuse": excuse},
               {**_item(2, "skipped", "not applicable: no cuda"), **entry,
                "test": "test_numerics", "check": "numerics"}]
    page = render.render_html(_report(results))
    assert render.state_of(results[0]) == "excused" and render.state_of(results[1]) == "n/a"
    assert '<td class="cell excused"' in page and '<td class="cell na"' in page
    assert ">e</b>excused" in page  # the legend
