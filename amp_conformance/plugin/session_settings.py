"""The run's settings: options, backend set-up and vendor declarations, resolved once.

Every hook, fixture and the report read the settings through :func:`settings`; the first
call validates them (a bad device, dtype, op list or property form is a pytest usage error).
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from amp_conformance.checks import registry
from amp_conformance.checks.call_forms import FORMS, Lit, Many, Sizes
from amp_conformance.checks.case import load_oplist
from amp_conformance.checks.tier import Run
from amp_conformance.plugin import options, vendor
from amp_conformance.plugin.options import Settings
from amp_conformance.plugin.xdist_roles import is_xdist_controller
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpList, OpListError

FORMS_HOOK = "pytest_amp_conformance_property_forms"
#: the sizes a hook's form is tried on while the settings are resolved
_PROBE = Sizes(2, 3, 4, 5, 2)

_SETTINGS = pytest.StashKey[Settings]()


def settings(config: pytest.Config) -> Settings:
    """The run's settings, validated on first use (raises pytest.UsageError)."""
    if _SETTINGS not in config.stash:
        vendor.setup_backend(config)
        resolved = vendor.apply(config, options.resolve(config))
        try:
            lists = load_oplist(resolved.device, resolved.oplists)
        except OpListError as exc:
            raise pytest.UsageError(f"amp-conformance: bad op list: {exc}") from None
        hooked = {str(Path(p)) for p in vendor.declarations(config).hook_oplists}
        _check_lists(resolved, lists, hooked)
        resolved = replace(resolved, forms=property_forms(config, resolved.device),
                           declarations=vendor.declarations(config),
                           **tier_settings(config, resolved.device))
        config.stash[_SETTINGS] = resolved
    return config.stash[_SETTINGS]


def tier_settings(config: pytest.Config, device: str) -> dict[str, Any]:
    """The settings fields each opt-in tier resolves from its options and hooks."""
    def hooks(name: str) -> list[tuple[str, Any]]:
        try:
            return vendor.hook_results(config, name, device)
        except vendor.DeclarationError as exc:
            raise pytest.UsageError(f"amp-conformance: {exc}") from None

    run = Run(device, hooks, controller=is_xdist_controller(config))
    known = {f.name for f in dataclasses.fields(Settings)}
    fields: dict[str, Any] = {"extra": {}}
    for tier in registry.tiers():
        for key, value in tier.resolve(config, run).items():
            if key in known:
                fields[key] = value
            else:
                fields["extra"][key] = value
    return fields


def _check_lists(resolved: Settings, lists: OpList, hooked: set[str]) -> None:
    """Refuse extra lists the run would ignore, and a device with no entry to check: both
    would otherwise look green (nothing generated, every item skipped)."""
    unused = [p for p in resolved.oplists if p not in set(lists.paths)]
    if unused:
        raise pytest.UsageError("amp-conformance: " + "; ".join(
            f"{'hook pytest_amp_conformance_oplists: ' if p in hooked else '--oplist '}{p} "
            f"describes another device than {resolved.device!r}: its [list] device is "
            f"{oplist.parse_file(p).device!r}" for p in unused))
    if not lists.entries:
        where = (f"its lists ({', '.join(lists.paths)}) have no entry" if lists.paths
                 else "no op list describes it")
        raise pytest.UsageError(
            f"amp-conformance: nothing to check on device {resolved.device!r}: {where}; pass "
            f"--oplist PATH with a list whose [list] device = \"{resolved.device}\" (built-in "
            f"lists exist for {', '.join(oplist.builtin_devices())})")


def property_forms(config: pytest.Config, device: str) -> dict[str, Callable[..., tuple]]:
    """``call_forms.FORMS`` merged with the results of the property-forms hooks, in call
    order (a later form of an op wins); a malformed result is a usage error naming the hook
    implementation and the key. Nothing global changes: the run passes the merged table."""
    forms: dict[str, Callable[..., tuple]] = dict(FORMS)
    try:
        results = vendor.hook_results(config, FORMS_HOOK, device)
    except vendor.DeclarationError as exc:
        raise pytest.UsageError(f"amp-conformance: {exc}") from None
    for where, result in results:
        if not isinstance(result, Mapping):
            raise pytest.UsageError(
                f"amp-conformance: {where}: returned {type(result).__name__} "
                f"{reprlib.repr(result)}; expected a dict {{op name: form}}, or None")
        for key, form in result.items():
            problem = _form_problem(key, form)
            if problem:
                raise pytest.UsageError(f"amp-conformance: {where}: key {key!r}: {problem}")
            forms[key] = form
    return forms


def _form_problem(key: Any, form: Any) -> str | None:
    """What is wrong with one ``op name: form`` pair of a hook's result, or None. The form
    is called once on sample sizes, so a bad one fails here rather than inside Hypothesis."""
    if not isinstance(key, str) or not key:
        return (f"the key is {type(key).__name__}, expected an op name (a non-empty str, "
                "the op of the device's op-list entries)")
    if not callable(form):
        return (f"the form is {type(form).__name__} {reprlib.repr(form)}, not callable; "
                "expected a function of call_forms.Sizes returning the argument tuple")
    try:
        args = form(_PROBE)
    except Exception as exc:  # noqa: BLE001 - a vendor's form may raise anything
        return f"the form raised {type(exc).__name__}: {exc} (called with {_PROBE})"
    if not isinstance(args, tuple):
        return f"the form returned {type(args).__name__} {reprlib.repr(args)}, expected a tuple"
    tensors = 0
    for i, item in enumerate(args):
        if isinstance(item, Lit):
            continue
        shapes = item.shapes if isinstance(item, Many) else (item,)
        if not all(_is_shape(s) for s in shapes):
            return (f"argument {i} of the form's tuple is {reprlib.repr(item)}; expected a "
                    "shape (a tuple of ints), Many((shape, ...)) or Lit(value)")
        tensors += len(shapes)
    return None if tensors else "the form's tuple has no tensor (a shape or Many)"


def _is_shape(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value)
