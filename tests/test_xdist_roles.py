"""Which part of an xdist run a process plays (plugin/xdist_roles.py), and what the
controller therefore leaves to its workers (op_db's import, checks/opinfo/tier.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from amp_conformance.checks.opinfo import source
from amp_conformance.checks.opinfo.tier import TIER as opinfo_tier
from amp_conformance.checks.tier import Run
from amp_conformance.plugin.xdist_roles import (
    DIST_KEY,
    is_worker,
    is_xdist_controller,
    scheduler,
)


class _Config:
    def __init__(self, workerinput: dict | None = None, usepdb: bool = False, **option):
        self.option = SimpleNamespace(**{"dist": "no", "numprocesses": None, **option})
        self.usepdb = usepdb
        self.values = {"amp_opinfo": True, "amp_opinfo_samples": None}
        if workerinput is not None:
            self.workerinput = workerinput

    def getoption(self, name, default=None):
        return self.usepdb if name == "usepdb" else self.values.get(name, default)


@pytest.mark.parametrize("config, controller", [
    (_Config(), False),  # serial
    (_Config(numprocesses=0), False),  # -n 0
    (_Config(numprocesses=2), True),  # -n 2, before xdist's pytest_cmdline_main
    (_Config(numprocesses=2, dist="load"), True),  # and after it
    (_Config(numprocesses="auto"), True),
    (_Config(numprocesses="auto", usepdb=True), False),  # xdist runs serially under --pdb
    (_Config(dist="loadscope", numprocesses=2), True),
    (_Config(workerinput={DIST_KEY: "load"}, dist="no"), False),  # a worker
], ids=["serial", "n0", "n2-early", "n2", "auto", "auto-pdb", "loadscope", "worker"])
def test_the_controller_is_known_from_the_command_line_on(config, controller):
    assert is_xdist_controller(config) is controller


def test_a_worker_knows_its_controllers_scheduler():
    worker = _Config(workerinput={DIST_KEY: "worksteal"})
    assert is_worker(worker) and scheduler(worker) == "worksteal"
    assert scheduler(_Config(workerinput={})) == "no"
    assert scheduler(_Config(dist="load", numprocesses=2)) == "load"
    assert scheduler(_Config()) == "no"


def test_an_xdist_controller_leaves_op_db_to_its_workers(monkeypatch):
    imported = []
    monkeypatch.setattr(source, "op_db", lambda: imported.append(True))
    checked = []
    monkeypatch.setattr(source, "check_installed", lambda: checked.append(True))
    def resolve(config: _Config) -> dict:
        return dict(opinfo_tier.resolve(config, Run("cpu", lambda name: [],
                                                    controller=is_xdist_controller(config))))

    assert resolve(_Config(numprocesses=2))["opinfo"] is True
    assert (checked, imported) == ([True], [])
    resolve(_Config())  # serial: imports it, as the items need it
    resolve(_Config(workerinput={DIST_KEY: "load"}))  # a worker, likewise
    assert (checked, imported) == ([True], [True, True])
