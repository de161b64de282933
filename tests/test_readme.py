"""README states what the code does: its generated parts are current."""

from pathlib import Path

from amp_conformance.checks import registry

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_lists_every_registered_check():
    text = README.read_text(encoding="utf-8")
    start, end = text.find(registry.BEGIN), text.find(registry.END)
    assert 0 <= start < end, "README has no generated check table"
    shown = text[start + len(registry.BEGIN):end].strip("\n") + "\n"
    assert shown == registry.markdown(), (
        "README's check table differs from amp_conformance/checks/registry.py; paste the "
        "output of: python -m amp_conformance.checks.registry")
