"""Version-aware op lists and messages: what applies on another torch, and why not.

The version facts come from shared/REFERENCE.md ("Messages and version differences",
"List history"); docs/versions.md lists them with the bound each one is recorded as.
Another torch version is simulated by passing the version (``Entry.version_gap(v)``,
``messages.expected(id, v)``) or by patching ``torch.__version__`` for the generator.
"""

from __future__ import annotations

import pytest
import torch

from amp_conformance.checks.case import Case
from amp_conformance.core.target import Target
from amp_conformance.plugin import parametrize
from amp_conformance.schema import messages, oplist

#: the oldest torch the suite supports (docs/versions.md, "Supported torch versions")
OLDEST = "2.4.0"


def entry(device: str, entry_id: str) -> oplist.Entry:
    (found,) = [e for e in oplist.load(device).entries if e.id == entry_id]
    return found


@pytest.mark.parametrize("version, expected", [
    ("2.13.0", "2.13.0"),
    ("2.14.1+cu130", "2.14.1"),
    ("2.15.0.dev20260101+cpu", "2.15.0"),  # a nightly counts as the release it leads to
    ("2.15.0a0+git1234abc", "2.15.0"),     # a source build likewise
    ("2.4", "2.4"),
])
def test_release_is_the_numeric_part(version, expected):
    assert oplist.release(version) == expected


# -- list history ------------------------------------------------------------------------

#: (device, entry id, first torch with it): REFERENCE.md "List history"
SINCE = [
    ("cuda", "rms_norm", "2.12"),
    ("cpu", "_addmm_activation", "2.6"),
    ("cuda", "vdot", "2.4"),
]


@pytest.mark.parametrize("device, entry_id, since", SINCE)
def test_entries_carry_their_first_version(device, entry_id, since):
    e = entry(device, entry_id)
    assert e.since == since
    major, minor = since.split(".")
    before = f"{major}.{int(minor) - 1}.0"
    assert e.version_gap(before) == f"not applicable: needs torch >= {since}, running {before}"
    assert e.version_gap(f"{since}.0") is None
    assert e.version_gap(f"{since}.0.dev20250101+cpu") is None
    # the running torch has it, or is older (rms_norm since 2.12, on torch 2.11)
    running = oplist.release(torch.__version__)
    expected = None if running >= since else \
        f"not applicable: needs torch >= {since}, running {torch.__version__}"
    assert e.version_gap(torch.__version__) == expected


@pytest.mark.parametrize("device, entry_id", [("cuda", "linalg_vecdot"), ("cpu", "linalg_vecdot")])
def test_facts_older_than_the_oldest_supported_torch_need_no_bound(device, entry_id):
    """linalg_vecdot is listed since 2.2, before the suite's oldest torch: always applies."""
    assert entry(device, entry_id).version_gap(OLDEST) is None


@pytest.mark.parametrize("device", oplist.builtin_devices())
def test_every_bound_is_a_release_with_since_before_until(device):
    for e in oplist.load(device).entries:
        for bound in (e.since, e.until):
            if bound is not None:
                assert oplist.release(bound) == bound, (e.id, bound)
        if e.since and e.until:
            assert oplist.release(e.since) < e.until, e.id


def test_until_bound_reports_removal():
    e = entry("cuda", "rms_norm")
    gone = oplist.Entry(**{**e.__dict__, "since": None, "until": "2.14"})
    assert gone.version_gap("2.13.0") is None
    assert gone.version_gap("2.14.1") == "not applicable: removed in torch 2.14, running 2.14.1"


def _case(device: str, entry_id: str, fake: bool = False) -> Case:
    return Case(Target(device, fake), torch.bfloat16, entry(device, entry_id))


# The lists are loaded under the real torch (the loader checks ops and overloads against
# the running dispatcher); only then is the version the generator sees patched.


@pytest.mark.parametrize("check", ["policy", "numerics", "outside", "legacy"])
def test_generator_reports_version_gaps_as_not_applicable(monkeypatch, check):
    """On a simulated torch 2.11 the rms_norm items are generated, skipped with the reason."""
    rms_norm, addmm_activation = _case("cuda", "rms_norm", fake=True), _case("cpu", "_addmm_activation")
    monkeypatch.setattr(torch, "__version__", "2.11.0")
    reason = parametrize.not_applicable(check, rms_norm)
    assert reason == "not applicable: needs torch >= 2.12, running 2.11.0"
    monkeypatch.setattr(torch, "__version__", "2.5.1")
    reason = parametrize.not_applicable(check, addmm_activation)
    assert reason == "not applicable: needs torch >= 2.6, running 2.5.1"


def test_generator_applies_entries_on_their_version(monkeypatch):
    rms_norm = _case("cuda", "rms_norm", fake=True)
    monkeypatch.setattr(torch, "__version__", "2.12.0")
    assert parametrize.not_applicable("policy", rms_norm) is None


@pytest.mark.parametrize("version", ["2.4.1", "2.11.0", "2.13.0", "2.14.1", "2.15.0.dev20260101"])
def test_simulated_torch_skips_exactly_the_entries_outside_their_bounds(monkeypatch, version):
    entries = {d: oplist.load(d).entries for d in ("cpu", "cuda")}
    monkeypatch.setattr(torch, "__version__", version)
    r = oplist.release(version)
    for device, listed in entries.items():
        skipped = {e.id for e in listed if e.version_gap() is not None}
        outside = {e.id for e in listed
                   if (e.since and r < e.since) or (e.until and r >= e.until)}
        assert skipped == outside, device
    gaps = {e.id: e.version_gap() for e in entries["cuda"]}
    assert (gaps["rms_norm"] is None) == (r >= "2.12")


# -- messages ------------------------------------------------------------------------------

#: (message id, version, the start of the recorded text or None): REFERENCE.md
#: "Messages and version differences" and the 2.11/2.13 observation in messages.toml
MESSAGES = [
    ("invalid_device", "2.4.0", "Invalid device string"),
    ("non_string_device_type", "2.4.0", "Expected `device_type` of type `str`"),
    ("legacy_autocast_deprecated", "2.4.0", "`torch.{device}.amp.autocast(args...)` is deprecated"),
    ("unsupported_dtype", "2.9.1", None),
    ("unsupported_dtype", "2.10.0", "In {DEVICE} autocast, but the target dtype is not supported"),
    ("cuda_unavailable", "2.7.1", None),
    ("cuda_unavailable", "2.8.0", "User provided device_type of 'cuda'"),
    ("cuda_unavailable", "2.9.1", "User provided device_type of 'cuda'"),
    ("cuda_unavailable", "2.10.0", "CUDA is not available or torch_xla is imported"),
    ("cuda_unavailable", "2.10.0.dev20250901+cpu", "CUDA is not available or torch_xla"),
    ("cuda_unavailable", "2.14.1+cu130", "CUDA is not available or torch_xla is imported"),
    ("not_callable", "2.12.1", None),
    ("not_callable", "2.13.0", "autocast()(func) requires a callable"),
    ("cuda_bf16_unsupported", OLDEST, "Current CUDA Device does not support bfloat16"),
]


@pytest.mark.parametrize("message_id, version, start", MESSAGES)
def test_messages_recorded_per_version(message_id, version, start):
    found = messages.expected(message_id, version)
    if start is None:
        assert found is None, f"{message_id} on {version}: {found}"
    else:
        assert found is not None and found.text.startswith(start), (message_id, version, found)


def test_each_message_id_has_one_wording_per_version():
    ids = {m.id for m in messages._all()}
    for version in [f"2.{minor}.0" for minor in range(4, 16)]:
        for mid in ids:
            wordings = [m for m in messages._all() if m.id == mid and m.applies(version)]
            assert len(wordings) <= 1, (mid, version, wordings)
