"""Warnings are part of the verdict (plugin/warned.py): the autocast machinery's warnings
fail an item unless the reference gives them for a user's call of what it deprecates."""

from __future__ import annotations

import os
import warnings

import torch

from amp_conformance.plugin import warned

TORCH_FILE = os.path.join(os.path.dirname(torch.__file__), "utils", "checkpoint.py")
VMAP_FILE = os.path.join(os.path.dirname(torch.__file__), "_functorch", "vmap.py")
LEGACY = ("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
          "`torch.amp.autocast('cpu', args...)` instead.")


def _message(text, category=FutureWarning, filename=__file__):
    return warnings.WarningMessage(category(text), category, filename, 1)


def test_the_reference_warnings_are_read_from_the_reference():
    read = {text for _category, text in warned.reference("cpu")}
    assert LEGACY in read  # what torch.cpu.amp.autocast() says, read by calling it


SUITE_FILE = os.path.join(os.path.dirname(os.path.dirname(warned.__file__)), "checks",
                          "legacy", "check.py")


def test_a_deprecation_is_the_references_own_only_where_a_user_calls_it(monkeypatch):
    """In an item the user is the suite's own check: the deprecation pointing at its line is
    the reference's; from inside torch it is the machinery calling what it deprecates, and
    from a backend's own module the words are borrowed (a backend that warns so under
    autocast only is not excused by them)."""
    monkeypatch.setattr(warned, "settings", lambda config: type("S", (), {"device": "cpu"}))
    users = _message(LEGACY, filename=SUITE_FILE)
    torchs = _message(LEGACY, filename=TORCH_FILE)
    borrowed = _message(LEGACY, filename="/opt/vendor/fakegpu_backend/autocast.py")
    unknown = _message("autocast region re-entered the legacy way", filename=TORCH_FILE)
    other = _message("torch.lu is deprecated", UserWarning, VMAP_FILE)  # not autocast's
    found = warned.departures(None, [users, torchs, borrowed, unknown, other])
    assert found == [torchs, borrowed, unknown]


def test_a_warning_from_the_references_own_line_of_torch_is_the_references(monkeypatch):
    """``torch.autocast(device, dtype=<one it lacks>)`` warns from autocast's own line and
    turns the region off: the reference's behaviour (PyTorch/XLA's regions of float16 on
    XLA:CPU), read by making the call, not typed here; the same words from another line of
    torch are not."""
    monkeypatch.setattr(warned, "settings", lambda config: type("S", (), {"device": "cpu"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.autocast("cpu", dtype=torch.float64)
    (said,) = [w for w in caught if warned.machinery(w)]
    # from a check's own region (the suite's line) or autocast's own line: where it was seen
    own = warnings.WarningMessage(said.message, said.category, *(
        (said.filename, said.lineno) if warned._in_torch(said) else (SUITE_FILE, 1)))
    elsewhere = warnings.WarningMessage(said.message, said.category, TORCH_FILE, 1)
    borrowed = warnings.WarningMessage(said.message, said.category, "/opt/vendor/amp.py", 1)
    assert warned.departures(None, [own, elsewhere, borrowed]) == [elsewhere, borrowed]
