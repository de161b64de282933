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


def test_pytest_arguments_without_the_separator_are_refused_with_the_fixed_command(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", "--report", "r.json", "--device", "cpu"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --device" in err
    assert ("pytest's arguments go after --: python -m amp_conformance run --report r.json -- "
            "--device cpu") in err


def test_an_unknown_option_of_another_command_is_named_alone(capsys):
    with pytest.raises(SystemExit):
        main(["coverage", "--device", "cpu", "--bogus"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and "go after --" not in err
