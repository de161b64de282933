"""A conformance item's failure is worded only if its report keeps it
(plugin/deferred_repr.py): an excused failure's traceback is never formatted, a kept one is
formatted once, before the report leaves ``pytest_runtest_makereport``, and the item is
left as it was."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from amp_conformance.plugin import deferred_repr


class _Item:
    """A conformance item (or not) whose representation counts how often it is made."""

    def __init__(self, conformance: bool = True):
        self.conformance, self.made = conformance, 0

    def get_closest_marker(self, name):
        return object() if self.conformance and name == "amp_check" else None

    def repr_failure(self, excinfo, style=None):
        self.made += 1
        return f"the traceback of {excinfo}"


def _report(item: _Item, when: str = "call", excinfo: object = "ValueError"):
    """Drive the wrapper as pluggy does; the inner report asks the item for its words, as
    pytest's does. Returns (the wrapper, the report it is given)."""
    call = SimpleNamespace(when=when, excinfo=excinfo)
    wrapper = deferred_repr.pytest_runtest_makereport(item, call)
    next(wrapper)
    report = SimpleNamespace(longrepr=item.repr_failure(excinfo), outcome="failed")
    return wrapper, report


def _finish(wrapper, report):
    with pytest.raises(StopIteration) as done:
        wrapper.send(report)
    return done.value.value


def test_an_excused_failure_is_never_worded_and_the_item_is_as_it_was():
    item = _Item()
    wrapper, report = _report(item)
    assert isinstance(report.longrepr, deferred_repr.Deferred) and item.made == 0
    report.longrepr, report.outcome = ("suite.py", 3, "excused"), "skipped"  # as excuses does
    assert _finish(wrapper, report).longrepr == ("suite.py", 3, "excused")
    assert item.made == 0 and "repr_failure" not in vars(item)


def test_a_kept_failure_is_worded_once_by_the_end_of_its_report():
    item = _Item()
    wrapper, report = _report(item)
    prefixed = f"a plugin's words\n{report.longrepr}"  # a wrapper that words it reads it
    assert prefixed.endswith("the traceback of ValueError") and item.made == 1
    assert _finish(wrapper, report).longrepr == "the traceback of ValueError"
    assert item.made == 1 and "repr_failure" not in vars(item)


@pytest.mark.parametrize("case", ["not a conformance item", "setup", "passed"])
def test_otherwise_pytest_words_it_at_once(case):
    item = _Item(conformance=case != "not a conformance item")
    wrapper, report = _report(item, when="setup" if case == "setup" else "call",
                              excinfo=None if case == "passed" else "ValueError")
    assert report.longrepr == "the traceback of " + ("None" if case == "passed" else "ValueError")
    assert item.made == 1
    _finish(wrapper, report)


def test_an_items_own_repr_failure_is_put_back():
    item = _Item()
    own = item.repr_failure
    item.repr_failure = own  # an instance attribute of its own
    wrapper, report = _report(item)
    _finish(wrapper, report)
    assert vars(item)["repr_failure"] is own and item.made == 1
