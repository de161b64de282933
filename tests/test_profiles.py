"""The Hypothesis profiles of the property checks (checks/profiles.py): registered, chosen
with ``--amp-hypothesis-profile``, and what a user sees of a property's failure under them.

These run the suite through pytest (``pytester``, in-process): the option selects the
profile for the run, an unknown one is a usage error, and a failing property prints the
shrunk example and the reproduction; the profile and any patch are undone after, and the
autocast state is checked to be what it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from torch.amp import autocast_mode

import amp_conformance.suite
from amp_conformance.checks import profiles

SUITE = Path(amp_conformance.suite.__file__).parent

pytestmark = pytest.mark.usefixtures("state_restored")


BREAK_DICTS = '''
import torch
from torch.amp import autocast_mode

_real = autocast_mode._cast

def _cast(value, device_type, dtype):
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, device_type, dtype) for v in value)
    return _real(value, device_type, dtype)

def pytest_configure(config):
    autocast_mode._cast = _cast

def pytest_unconfigure(config):
    autocast_mode._cast = _real
'''


@pytest.fixture
def inner_run(pytester, monkeypatch):
    """Run pytest in-process; the profile it selects and any patch are undone after."""
    monkeypatch.setattr(profiles, "_selected", profiles._selected)
    monkeypatch.setattr(autocast_mode, "_cast", autocast_mode._cast)
    pytester.syspathinsert()
    return pytester


def test_suite_failure_shows_shrunk_example_and_reproduction(inner_run):
    inner_run.makepyfile(break_dicts=BREAK_DICTS)
    result = inner_run.runpytest(str(SUITE / "test_custom_fwd.py"), "-p", "break_dicts",
                                 "-k", "cast_inputs", "-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*custom_fwd(cast_inputs=...) casts exactly the eligible tensors*",
        "*should arrive cast*",
        "*reproduce:*",
        "*Failing explicit example*",
    ])


def test_profile_option_selects_profile(inner_run):
    inner_run.makepyfile(test_which="""
        from amp_conformance.checks import profiles

        def test_which():
            assert profiles.selected_name() == "nightly"
            assert profiles.selected().max_examples >= 1000
    """)
    result = inner_run.runpytest("--amp-hypothesis-profile", "nightly")
    result.assert_outcomes(passed=1)


def test_unknown_profile_is_a_usage_error(inner_run):
    inner_run.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = inner_run.runpytest("--amp-hypothesis-profile", "weekly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid choice: 'weekly'*"])


def test_profiles_registered():
    """ci is derandomized, deadline-free and small; nightly runs thousands of examples."""
    profiles.profiles()  # registered on first use
    ci = settings.get_profile(profiles.PREFIX + "ci")
    assert ci.derandomize and ci.deadline is None and ci.max_examples <= 50
    nightly = settings.get_profile(profiles.PREFIX + "nightly")
    assert nightly.max_examples >= 1000
