"""README states what the code does: its generated parts are current."""

import re
from pathlib import Path

from amp_conformance.checks import registry
from amp_conformance.properties.call_forms import FORMS

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_lists_every_registered_check():
    text = README.read_text(encoding="utf-8")
    start, end = text.find(registry.BEGIN), text.find(registry.END)
    assert 0 <= start < end, "README has no generated check table"
    shown = text[start + len(registry.BEGIN):end].strip("\n") + "\n"
    assert shown == registry.markdown(), (
        "README's check table differs from amp_conformance/checks/registry.py; paste the "
        "output of: python -m amp_conformance.checks.registry")


def test_readme_lists_the_ops_the_properties_call():
    """"Which ops the properties call" (For backend vendors) names exactly FORMS' ops."""
    text = README.read_text(encoding="utf-8")
    begin, end = "<!-- property-forms:begin -->", "<!-- property-forms:end -->"
    start, stop = text.find(begin), text.find(end)
    assert 0 <= start < stop, "README has no property-forms list"
    shown = re.findall(r"`([^`]+)`", text[start + len(begin):stop])
    assert shown == sorted(FORMS), (
        "README's list of the ops the properties call differs from call_forms.FORMS; paste: "
        "python -c \"from amp_conformance.properties.call_forms import FORMS; "
        "print(', '.join(f'`{k}`' for k in sorted(FORMS)))\"")
