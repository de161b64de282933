"""The atlas as a page (tools/atlas_page.py, ``atlas --html``): the published atlases, one
per torch release and PyTorch/XLA's real device, rendered and opened in a real browser
(Debian's chromium, headless): no console error, one row per op, and the differs view
showing exactly the rows where two columns disagree."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from amp_conformance.tools import atlas_page

ROOT = Path(__file__).resolve().parent.parent
#: the published atlases, oldest release first, and the page made of them
PUBLISHED = [ROOT / "docs" / "data" / "atlases" / "torch-2.6.json",
             ROOT / "docs" / "data" / "atlases" / "torch-2.9.json",
             ROOT / "docs" / "data" / "atlas.json",  # docs/atlas.md's, of CI's torch
             ROOT / "docs" / "data" / "atlases" / "torch-2.15.json",
             ROOT / "examples" / "vendors" / "xla" / "atlas.json"]  # xla and cpu, 2.9
SOURCES = [str(p.relative_to(ROOT)) for p in PUBLISHED]
PAGE = ROOT / "docs" / "atlas.html"
COMMAND = "python -m amp_conformance atlas --html docs/atlas.html --from " + " ".join(SOURCES)


def _atlases() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in PUBLISHED]


def test_kinds_are_read_from_the_cells_words():
    assert [atlas_page.kind_of(c) for c in (
        "lower → bfloat16", "fp32 → float32", "fp32_opt_dtype → float32", "promote → float32",
        "via promote (cat) → float32", "via lower+fp32 (mm, exp) → float32",
        "banned: raises its error", "alone → float32", "error: NotImplementedError: x",
        "error (some-defect): reproduces it", "crashed the process (killed by SIGFPE)", "—",
    )] == ["lower", "fp32", "fp32", "promote", "promote", "lower", "banned", "alone", "error",
           "error", "error", "not run"]


def test_the_published_page_is_made_of_the_published_atlases():
    """docs/atlas.html is what the command makes of the atlases committed beside it; they
    span the matrix's floor to its newest release, on cpu and the fake devices, and XLA."""
    atlases = _atlases()
    releases = [a["torch"].split("+")[0] for a in atlases]
    assert releases[0].startswith("2.6") and releases[3].startswith("2.15"), releases
    assert all(set(a["devices"]) == {"cpu", "cuda", "xpu", "mps"} for a in atlases[:4])
    assert not atlases[4]["devices"]["xla"]["fake"]
    fresh = atlas_page.render(atlases, PAGE, SOURCES)
    assert PAGE.read_text(encoding="utf-8") == fresh, f"docs/atlas.html is stale: {COMMAND}"
    said = (f"one file of {len(fresh.encode()) / 1024:.0f} KiB for "
            f"{len({op for a in atlases for op in a['ops']})} ops × "
            f"{len(atlas_page.columns(atlases))} columns")
    assert said in (ROOT / "docs" / "operator-surface.md").read_text(encoding="utf-8"), said


def _differing(atlases: list[dict], a: int, b: int) -> int:
    """How many rows two columns disagree on, the autocast dtype read as "amp"."""
    data = atlas_page.data(atlases, PAGE.parent)
    ca, cb = data["columns"][a], data["columns"][b]
    return sum(r["cells"][a].replace(ca["amp"], "amp") != r["cells"][b].replace(cb["amp"], "amp")
               for r in data["rows"])


def _column(atlases: list[dict], device: str, release: str) -> int:
    return next(i for i, c in enumerate(atlas_page.columns(atlases))
                if c["device"] == device and c["torch"].startswith(release))


@pytest.fixture(scope="module")
def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("no chromium here to open the page in (Debian: apt-get install chromium)")
    return found


def _open(browser: str, fragment: str = "") -> tuple[str, list[str]]:
    """The page's DOM after its script ran, and the console lines it logged."""
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0",
                          "--dump-dom", PAGE.as_uri() + fragment],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout, [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def test_the_page_opens_in_a_browser_one_row_per_op(browser):
    dom, console = _open(browser)
    assert console == []
    ops = {op for a in _atlases() for op in a["ops"]}
    rows = re.findall(r'<tr data-op="([^"]+)"', dom)
    assert len(rows) == len(set(rows)) == len(ops)
    assert f'id="count">{len(ops)} of {len(ops)} ops shown' in dom


@pytest.mark.parametrize("a, b", [(("cpu", "2.13"), ("cuda", "2.13")),
                                  (("xla", "2.9"), ("cuda", "2.9")),
                                  (("cpu", "2.6"), ("cpu", "2.15"))],
                         ids=["cuda-vs-cpu", "xla-vs-cuda", "oldest-vs-newest"])
def test_the_differs_view_shows_exactly_the_rows_that_differ(browser, a, b):
    atlases = _atlases()
    i, j = _column(atlases, *a), _column(atlases, *b)
    want = _differing(atlases, i, j)
    dom, console = _open(browser, f"#differs={i},{j}")
    assert console == []
    total = len({op for x in atlases for op in x["ops"]})
    assert 0 < want < total
    assert len(re.findall(r'<tr data-op="', dom)) == want
    assert f'id="count">{want} of {total} ops shown' in dom
