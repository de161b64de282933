"""The manual states what the code does: docs/options.md's table is the plugin's."""

from __future__ import annotations

from pathlib import Path

from amp_conformance.core import generated
from amp_conformance.plugin import options

ROOT = Path(__file__).resolve().parent.parent


def test_the_options_page_is_generated_from_the_option_table():
    doc = ROOT / "docs" / "options.md"
    section = generated.section(doc.read_text(encoding="utf-8"), options.BEGIN, options.END)
    assert section is not None, f"{doc} lost its generated markers ({options.BEGIN})"
    assert section == options.options_markdown(), (
        "docs/options.md's table differs from amp_conformance/plugin/options.py; regenerate "
        "it with: python -c 'from pathlib import Path; from amp_conformance.plugin import "
        "options; options.write(Path(\"docs/options.md\"))'")


def test_the_option_table_shows_every_option_and_alias():
    table = options.options_markdown()
    for name in [*options._OPTIONS, *options.ALIASES]:
        assert f"`{name}`" in table, name
