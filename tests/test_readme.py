"""README is the entry page and the manual states what the code does: docs/checks.md's
generated parts are current, README stays short, docs/index.md links every page."""

import re
from pathlib import Path

from amp_conformance.checks import registry
from amp_conformance.checks.call_forms import FORMS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CHECKS = DOCS / "checks.md"
#: README is an entry page, not the manual
MAX_README_LINES = 200


def test_checks_page_lists_every_registered_check():
    text = CHECKS.read_text(encoding="utf-8")
    start, end = text.find(registry.BEGIN), text.find(registry.END)
    assert 0 <= start < end, "docs/checks.md has no generated check table"
    shown = text[start + len(registry.BEGIN):end].strip("\n") + "\n"
    assert shown == registry.markdown(), (
        "docs/checks.md's check table differs from amp_conformance/checks/registry.py; paste "
        "the output of: python -m amp_conformance.checks.registry")


def test_checks_page_lists_the_ops_the_properties_call():
    """"Which ops the properties call" (docs/checks.md) names exactly FORMS' ops."""
    text = CHECKS.read_text(encoding="utf-8")
    begin, end = "<!-- property-forms:begin -->", "<!-- property-forms:end -->"
    start, stop = text.find(begin), text.find(end)
    assert 0 <= start < stop, "docs/checks.md has no property-forms list"
    shown = re.findall(r"`([^`]+)`", text[start + len(begin):stop])
    assert shown == sorted(FORMS), (
        "docs/checks.md's list of the ops the properties call differs from call_forms.FORMS; "
        "paste: python -c \"from amp_conformance.checks.call_forms import FORMS; "
        "print(', '.join(f'`{k}`' for k in sorted(FORMS)))\"")


def test_readme_is_an_entry_page():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_README_LINES, (
        f"README.md has {lines} lines: keep it under {MAX_README_LINES}, the rest goes to docs/")
    assert "(docs/index.md)" in README.read_text(encoding="utf-8")


def test_the_index_links_every_page():
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[^)]*)?\)",
                            (DOCS / "index.md").read_text(encoding="utf-8")))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages - linked == set(), f"docs/index.md does not link {sorted(pages - linked)}"
