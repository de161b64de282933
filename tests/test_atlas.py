"""The atlas (tools/atlas.py, ``python -m amp_conformance atlas``): what autocast does to
every OpInfo on each device, built from the OpInfo tier. The committed page is its JSON and
a slice of it is current; its default devices are core.devices'; a drift lists the cells
that changed; a cell that kills the process costs that cell only."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("expecttest", reason="the OpInfo tier needs expecttest (pip install -e '.[dev]')")

from amp_conformance.checks.opinfo import source  # noqa: E402
from amp_conformance.core import devices  # noqa: E402
from amp_conformance.tools import atlas  # noqa: E402
from tests import backends  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_the_atlas_page_is_its_json_and_a_slice_of_it_is_current():
    data = json.loads((ROOT / "docs" / "data" / "atlas.json").read_text())
    assert (ROOT / "docs" / "atlas.md").read_text() == atlas.markdown(data)
    assert set(data["ops"]) == {r.id for r in source.refs()} or data["torch"] != torch.__version__
    if data["torch"] != torch.__version__:
        pytest.skip(f"docs/data/atlas.json is of torch {data['torch']}, this is {torch.__version__}")
    ops = ["addmm", "sin", "linalg.pinv-singular", "softmax", "cat", "nn.functional.binary_cross_entropy",
           "addcdiv"]  # addcdiv: its sample maker reads values (drawn off the fake device)
    fresh = atlas.build(["cpu", "cuda"], ops, isolated=False)
    assert {op: {d: data["ops"][op][d] for d in ("cpu", "cuda")} for op in ops} == fresh["ops"]


def test_the_default_atlas_covers_the_devices_core_names():
    """Which devices the atlas covers by default is a device fact (core.devices), and the
    committed docs/atlas.md is that atlas."""
    assert devices.atlas_devices() == ("cpu", "cuda", "xpu", "mps")
    parser = argparse.ArgumentParser()
    atlas.add_arguments(parser)
    assert parser.parse_args([]).devices == "cpu,cuda,xpu,mps"
    data = json.loads((ROOT / "docs" / "data" / "atlas.json").read_text())
    assert tuple(data["devices"]) == devices.atlas_devices() and "command" not in data


def test_atlas_drift_lists_changed_cells():
    old = {"torch": "a", "ops": {"mm": {"cpu": "lower → bfloat16"}, "sin": {"cpu": "alone → float32"}}}
    new = {"torch": "b", "ops": {"mm": {"cpu": "fp32 → float32"}, "sin": {"cpu": "alone → float32"}}}
    assert atlas.diff(old, new) == ["mm [cpu]: lower → bfloat16  ->  fp32 → float32"]


@pytest.mark.slow
def test_an_atlas_cell_that_kills_the_process_says_so_and_the_rest_is_made(tmp_path):
    """A backend that dies in one op (tests/backends/amp_crash.py: AutocastCPU roll aborts)
    costs that cell only: the atlas runs each device's cells in a child and goes on past it."""
    out = tmp_path / "atlas.json"
    proc = backends.run("-m", "amp_conformance", "atlas", "--devices", "cpu", "--backend-module",
                        "amp_crash", "--ops", "add,roll,mm", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = {op: c["cpu"] for op, c in json.loads(out.read_text())["ops"].items()}
    assert cells["roll"] == "crashed the process (killed by SIGABRT)", cells
    assert cells["add"].startswith("alone → ") and cells["mm"] == "lower → bfloat16", cells
