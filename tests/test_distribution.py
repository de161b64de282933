"""The order in which an xdist run hands out its items (plugin/distribution.py): the checks
made per device first, each test function's items together; the op-list checks' groups
after them, spread evenly; the same order in every worker, file order everywhere else."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from amp_conformance.plugin import distribution
from amp_conformance.plugin.xdist_roles import DIST_KEY

SUITE = ("--pyargs", "amp_conformance.suite.test_oplist", "amp_conformance.suite.test_regions",
         "-k", "bfloat16 and (torch_16 or region) and (test_policy or test_numerics or test_region)",
         "-p", "no:cacheprovider", "-p", "no:randomly")


class _Item:
    def __init__(self, nodeid: str, check: str | None = "policy", scope: str = "function"):
        self.nodeid = nodeid
        self.check = check  # policy: an op-list check; regions: one made per device
        fixturedef = SimpleNamespace(scope=scope)
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={"f": [fixturedef]})

    def get_closest_marker(self, name):
        if self.check and name == "amp_check":
            return SimpleNamespace(args=(self.check,))
        return None

    def __repr__(self) -> str:
        return self.nodeid


def _items(check: str = "policy", **groups: int) -> list[_Item]:
    return [_Item(f"t.py::{name}[{j}]", check) for name, n in groups.items() for j in range(n)]


def test_per_device_checks_come_first_whole_and_the_op_list_checks_spread_after():
    regions, compiled = _items("regions", regions=3), _items("compile_regions", compile=2)
    items = [*_items(slow=2, cheap=4)[:3], *compiled, *_items(slow=2, cheap=4)[3:], *regions]
    order = [i.nodeid for i in distribution.order(items)]
    assert order == ["t.py::regions[0]", "t.py::regions[1]", "t.py::regions[2]",
                     "t.py::compile[0]", "t.py::compile[1]", "t.py::cheap[0]", "t.py::slow[0]",
                     "t.py::cheap[1]", "t.py::cheap[2]", "t.py::slow[1]", "t.py::cheap[3]"]


def test_the_per_device_functions_with_most_items_come_first_ties_in_file_order():
    items = [*_items("gradscaler", one=1, three=3), *_items("regions", two=2, other=2)]
    order = [i.nodeid.partition("[")[0] for i in distribution.order(items)]
    assert order == ["t.py::three"] * 3 + ["t.py::two"] * 2 + ["t.py::other"] * 2 + ["t.py::one"]


def test_each_group_is_spread_evenly_over_the_run():
    items = _items(slow=2, cheap=6, one=1)
    order = [i.nodeid for i in distribution.spread(items)]
    assert order == ["t.py::cheap[0]", "t.py::slow[0]", "t.py::cheap[1]", "t.py::cheap[2]",
                     "t.py::one[0]", "t.py::cheap[3]", "t.py::slow[1]", "t.py::cheap[4]",
                     "t.py::cheap[5]"]


def test_spreading_keeps_every_item_and_each_groups_order():
    items = _items(a=7, b=3, c=11, d=1)
    order = distribution.spread(items)
    assert sorted(map(id, order)) == sorted(map(id, items))
    for name in "abcd":
        mine = [i.nodeid for i in order if i.nodeid.startswith(f"t.py::{name}[")]
        assert mine == [i.nodeid for i in items if i.nodeid.startswith(f"t.py::{name}[")]
    assert distribution.spread(list(items)) == order  # the same order every time


def _config(dist: str | None) -> SimpleNamespace:
    config = SimpleNamespace(option=SimpleNamespace(dist="no"))
    if dist is not None:
        config.workerinput = {DIST_KEY: dist}
    return config


@pytest.mark.parametrize("dist", distribution.SPREAD_UNDER)
def test_a_worker_under_load_or_worksteal_reorders(dist):
    def made() -> list[_Item]:
        return [*_items(slow=2, cheap=6), *_items("regions", regions=2)]

    items = made()
    distribution.pytest_collection_modifyitems(_config(dist), items)
    ordered = [i.nodeid for i in distribution.order(made())]
    assert [i.nodeid for i in items] == ordered != [i.nodeid for i in made()]


@pytest.mark.parametrize("why", ["serial", "loadscope", "another project's items",
                                 "a module-scoped fixture"])
def test_otherwise_file_order_is_kept(why):
    items = _items(slow=2, cheap=6)
    if why == "another project's items":
        items = [_Item(i.nodeid, check=None) for i in items]
    if why == "a module-scoped fixture":
        items[3] = _Item(items[3].nodeid, scope="module")
    before = [i.nodeid for i in items]
    dist = {"serial": None, "loadscope": "loadscope"}.get(why, "load")
    distribution.pytest_collection_modifyitems(_config(dist), items)
    assert [i.nodeid for i in items] == before


@pytest.mark.slow
def test_every_worker_runs_in_the_same_order(pytester):
    """Under -n 2 both workers collect the same order (xdist refuses differing ones), and
    every item runs once; serially, file order."""
    pytester.makeconftest("""
        import json, pytest

        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(session):
            role = getattr(session.config, "workerinput", {}).get("workerid", "main")
            with open(f"order-{role}.json", "w") as out:
                json.dump([f"{item.path.name}{item.nodeid}" for item in session.items], out)
    """)
    serial = pytester.runpytest(*SUITE)  # in process: a serial run orders nothing
    assert serial.ret == 0, serial.stdout.str()[-2000:]
    parallel = pytester.runpytest_subprocess(*SUITE, "-n", "2")
    assert parallel.ret == 0, parallel.stdout.str()[-2000:]
    assert serial.parseoutcomes()["passed"] == parallel.parseoutcomes()["passed"]
    orders = {p.stem.split("-")[1]: json.loads(p.read_text())
              for p in pytester.path.glob("order-*.json")}
    assert sorted(orders) == ["gw0", "gw1", "main"]
    assert orders["gw0"] == orders["gw1"] != orders["main"]
    assert sorted(orders["gw0"]) == sorted(orders["main"])
    ordered = orders["gw0"]
    regions = [i for i, nodeid in enumerate(ordered) if "test_regions.py" in nodeid]
    assert regions == list(range(len(regions))) != []  # the per-device checks first, whole
    spread = ordered[len(regions):]
    half = len(spread) / 2
    groups = {nodeid.partition("[")[0] for nodeid in spread}
    assert len(groups) > 1
    for group in groups:  # in file order a group sits in one part of the run; here, in both
        at = [i for i, nodeid in enumerate(spread) if nodeid.partition("[")[0] == group]
        assert len(at) == 1 or at[0] < half <= at[-1], group
