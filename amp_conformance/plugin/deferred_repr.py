"""A conformance item's failure is put into words only if it stays a failure.

pytest makes a failed item's representation (its traceback, each entry's source found by
parsing the whole file it is in) as soon as the item fails, before the plugins that make
its report have seen it; this plugin then excuses some of those failures
(:mod:`amp_conformance.plugin.excuses`: a kernel the device lacks, a limit it has), and
their words are thrown away: against a backend with limits, most of a run. So, during a
conformance item's report, its representation is :class:`Deferred`, made at its first read
(a plugin that words the failure reads it); a report still failed (or an expected failure)
once the plugin's report wrappers are done gets it made then, before the report leaves
``pytest_runtest_makereport``, while the failure's frames are as they were. Registered
after the plugin's other report wrappers, so that it wraps them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr

from amp_conformance.plugin.items import is_conformance


class Deferred(TerminalRepr):
    """A failure's representation, made when first read."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._made: Any = None

    def made(self) -> Any:
        if self._made is None:
            self._made = self._make()
        return self._made

    def __getattr__(self, name: str) -> Any:  # reprcrash, reprtraceback, chain, sections
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.made(), name)

    def __str__(self) -> str:
        return str(self.made())

    def toterminal(self, tw: Any) -> None:
        made = self.made()
        if isinstance(made, str):
            tw.line(made)
        else:
            made.toterminal(tw)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201
    if call.when != "call" or call.excinfo is None or not is_conformance(item):
        return (yield)
    own = vars(item).get("repr_failure")
    made = item.repr_failure

    def repr_failure(excinfo: Any, *args: Any, **kwargs: Any) -> Deferred:
        return Deferred(lambda: made(excinfo, *args, **kwargs))

    item.repr_failure = repr_failure  # type: ignore[method-assign]
    try:
        report = yield
    finally:
        if own is None:
            del item.repr_failure
        else:
            item.repr_failure = own  # type: ignore[method-assign]
    if isinstance(report.longrepr, Deferred):
        report.longrepr = report.longrepr.made()
    return report
