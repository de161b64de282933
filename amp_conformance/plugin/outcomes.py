"""What the items' outcomes say beyond pytest's counts, read from the run's one tally
(:func:`amp_conformance.plugin.report.collect.tally`).

- **Failures by cause.** The terminal summary groups the failed conformance items by
  cause (:mod:`amp_conformance.plugin.report.causes`): 255 red items with one cause read as
  one line, largest first.
- **An opt-in tier that ran nothing.** A tier asked for by its option (``--amp-opinfo``,
  ``--amp-compile``, ``--wrapper``: the registry's ``opt_in``) whose every item was skipped
  did not run at all: that is a setup error (the samples cannot be drawn on the device, the
  backend lacks what the tier needs…), never a quiet green, even where the rest of the run
  passed; :mod:`amp_conformance.plugin.verdict` makes it exit status 4 and the report says
  so (``run.setup_errors``). ``--amp-allow-empty`` lets it pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from amp_conformance.checks import registry
from amp_conformance.core.errors import first_line, headline
from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.banner import excused_line
from amp_conformance.plugin.report.collect import tally
from amp_conformance.plugin.xdist_roles import is_worker

#: a tier of fewer items than this says too little to call its skips a setup error
MIN_ITEMS = 2


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201
    """A failure that is several (Hypothesis's distinct failures) names each in its
    message's first line, which the causes table groups by."""
    report = yield
    group = call.excinfo.value if call.excinfo is not None else None
    if report.failed and isinstance(group, BaseExceptionGroup):
        crash = getattr(report.longrepr, "reprcrash", None)  # read only here: it is made
        if crash is not None:                                # when read (deferred_repr)
            crash.message = distinct(group)
    return report


def distinct(group: BaseExceptionGroup) -> str:
    """``"Hypothesis found 2 distinct failures: (1) Type: line; (2) Type: line"``."""
    said = [headline(f"{type(e).__name__}: {e}") for e in group.exceptions]
    return (f"{first_line(group.message).rstrip('.')}: "
            + "; ".join(f"({i}) {line}" for i, line in enumerate(said, 1)))


def rows(config: pytest.Config) -> list[dict[str, Any]]:
    """One result per conformance item this process heard of (the report's ``results``)."""
    acc = tally(config)
    if acc is None:
        return []
    return [r.as_json() for r in acc.records.values() if r.info.get("check") is not None]


def setup_errors(items: list[dict[str, Any]]) -> list[str]:
    """One sentence per opt-in tier all of whose items (at least MIN_ITEMS) were skipped,
    naming the cause most of them share."""
    found = []
    for check in registry.REGISTRY.values():
        if check.opt_in is None:
            continue
        tier = [r for r in items if r.get("check") == check.name]
        if len(tier) < MIN_ITEMS or any(r["outcome"] != "skipped" for r in tier):
            continue
        grouped = causes.group(tier, ("skipped",))
        largest = grouped[0]
        rest = len(tier) - largest["count"]
        others = (f" ({rest} more for {len(grouped) - 1} other cause"
                  f"{'s' if len(grouped) > 2 else ''})" if rest else "")
        how = "for one cause" if not rest else f"{largest['count']} of them for one cause"
        found.append(f"{check.opt_in} ran nothing: all {len(tier)} of its items were skipped, "
                     f"{how}: {largest['example']}{others}")
    return found


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if is_worker(config):
        return
    found = rows(config)
    said = excused_line({"results": found})
    if said:  # what a green verdict did not check, and why (plugin/excuses.py)
        terminalreporter.write_sep("-", f"amp-conformance: {said} (each proved independent of "
                                        "autocast; --amp-no-excuses fails them)")
    grouped = causes.group(found)
    if grouped:
        terminalreporter.write_sep("-", f"amp-conformance: {causes.headcount(grouped)}, "
                                        "largest first")
        for row in grouped[:10]:
            more = f" (and {row['count'] - 1} more)" if row["count"] > 1 else ""
            terminalreporter.write_line(f"{row['count']:>5} × {row['cause']}")
            terminalreporter.write_line(f"        e.g. {row['items'][0]}{more}")
        if len(grouped) > 10:
            terminalreporter.write_line(f"  … and {len(grouped) - 10} more causes")
