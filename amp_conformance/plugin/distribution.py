"""The order in which an xdist run hands out its items: what shares a process's warm-up
together, then what levels the workers' ends.

pytest-xdist's ``load`` scheduler gives each worker a run of consecutive items to start with
(a quarter of its share), then shorter runs as each asks for more; ``worksteal`` gives each
worker a half and lets an idle one take half of another's rest. Nothing there knows what an
item costs, nor what a process pays the first time it meets a kind of item: dynamo's first
compile, Hypothesis's first example, the first call of each kernel of a device (a GPU
loads a kernel into each process that calls it). Spread evenly over the run, every test
function had every worker pay its warm-up: on an H200 with ``-n auto`` (16 workers) the
items' own time summed to 185 s against 43 s serial, the compile-region items' to 87 s
against 9 s. Left in file order, the op-list checks of a millisecond each came before the
slow ones, and one worker ended long after the other.

So under those two schedulers every worker orders its items the same way: first the items
of the checks made per device and amp dtype (not per op-list entry), each test function's
items together, so that xdist's first runs give each function to as few workers as its
items fill, the functions with the most items first (a stand-in for the longest: in file
order the first run of one worker held the compile-region items and most of the other
per-device checks, and it ended seconds after the other); then the op-list checks' items,
the ``k`` items of each test function at the fractions ``(j + 1/2) / k`` of that part, ties
broken by where the function first appeared: one entry's checks sit side by side (they call
the same kernels), and the last items, the cheapest, level the workers' ends. The order
depends on the collected items alone, so every worker collects the same one (xdist requires
it); ids, counts and the report (sorted by node id) are unchanged, and a serial run, or
another scheduler's, keeps file order.

Not where an item uses a fixture scoped to its module, class or package (a vendor's
``conftest.py`` may add one): reordered items would set it up again and again.
"""

from __future__ import annotations

import pytest

from amp_conformance.core.registry import REGISTRY
from amp_conformance.plugin.items import check_of, has_conformance_items
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


def groups(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """``items`` by test function (:func:`group_of`), in order of first appearance."""
    by_function: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        by_function.setdefault(group_of(item), []).append(item)
    return list(by_function.values())


def spread(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each group's members at evenly spaced fractions of the run."""
    placed = [((j + 0.5) / len(members), first, j, item)
              for first, members in enumerate(groups(items))
              for j, item in enumerate(members)]
    placed.sort(key=lambda p: p[:3])
    return [p[3] for p in placed]


def per_entry(item: pytest.Item) -> bool:
    """Whether the item is an op-list entry's check (one item per entry and amp dtype)."""
    check = REGISTRY.get(check_of(item) or "")
    return check is not None and check.per_entry


def order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The checks made per device first, each test function's items together, the
    functions with the most items first; the op-list checks' items after them, spread."""
    entries = {id(i) for i in items if per_entry(i)}
    per_device = groups([i for i in items if id(i) not in entries])
    largest_first = sorted(per_device, key=len, reverse=True)
    return [i for group in largest_first for i in group] + spread(
        [i for i in items if id(i) in entries])


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
    items[:] = order(items)
