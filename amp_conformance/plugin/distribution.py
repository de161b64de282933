"""The order in which an xdist run hands out its items: every check's items spread evenly.

pytest-xdist's ``load`` scheduler gives each worker a run of consecutive items to start with
(a quarter of its share), then shorter runs as each asks for more; ``worksteal`` gives each
worker a half and lets an idle one take half of another's rest. Nothing there knows what an
item costs. In file order one check's items sit together: the suite's 60 compile-region
items (5.3 s of a 13.7 s serial run, in 3 % of its items) went whole into one worker's
first run, and that worker ended long after the other.

So under those two schedulers every worker orders its items the same way: the ``k`` items of
a group (one test function's parametrizations) sit at the fractions ``(j + 1/2) / k`` of the
run, ties broken by where the group first appeared. Any run of consecutive items then holds
about the same share of every group, whatever the number of workers, and the last items
come from the largest groups, the op-list checks of a millisecond each, which level the
workers' ends. The order depends on the collected items alone, so every worker collects the
same one (xdist requires it); ids, counts and the report (sorted by node id) are unchanged,
and a serial run, or another scheduler's, keeps file order.

Not where an item uses a fixture scoped to its module, class or package (a vendor's
``conftest.py`` may add one): spread items would set it up again and again.
"""

from __future__ import annotations

import pytest

from amp_conformance.plugin.items import has_conformance_items
from amp_conformance.plugin.xdist_roles import is_worker, scheduler

#: the xdist schedulers that hand out items in collection order, item by item
SPREAD_UNDER = ("load", "worksteal")
#: fixture scopes that spreading would set up again for every item
_SHARED_SCOPES = frozenset({"module", "class", "package"})


def group_of(item: pytest.Item) -> tuple[str, str]:
    """The item's test function: its file, and its node id without the parametrization (a
    node id alone may not name the file: the suite imported by ``--pyargs`` from outside
    the rootdir)."""
    return str(getattr(item, "path", "")), item.nodeid.partition("[")[0]


def spread(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each group's members at evenly spaced fractions of the run."""
    groups: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(group_of(item), []).append(item)
    placed = [((j + 0.5) / len(members), first, j, item)
              for first, members in enumerate(groups.values())
              for j, item in enumerate(members)]
    placed.sort(key=lambda p: p[:3])
    return [p[3] for p in placed]


def shares_a_scoped_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d and d[-1].scope in _SHARED_SCOPES for d in defs)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not is_worker(config) or scheduler(config) not in SPREAD_UNDER:
        return
    if not has_conformance_items(items):
        return  # another project's run: its order is its own
    if any(shares_a_scoped_fixture(item) for item in items):
        return
    items[:] = spread(items)
