"""``python -m amp_conformance`` (amp_conformance/__main__.py): its help speaks to users."""

from __future__ import annotations

import pytest

from amp_conformance.__main__ import COMMANDS, main


def test_help_lists_the_commands_and_says_how_to_run_the_suite(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "pytest --pyargs amp_conformance --device DEV" in out
    assert all(name in out for name in COMMANDS)
    assert "python -m amp_conformance review DEV.toml" in out
    assert "add_arguments" not in out and "module" not in out.split("examples:")[0].lower()
