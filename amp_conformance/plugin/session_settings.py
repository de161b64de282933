"""The run's settings: options, backend set-up and vendor declarations, resolved once.

Every hook, fixture and the report read the settings through :func:`settings`; the first
call validates them (a bad device, dtype, op list or property form is a pytest usage error).
"""

from __future__ import annotations

import importlib
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from amp_conformance.checks.case import load_oplist
from amp_conformance.checks.wrappers import declare
from amp_conformance.plugin import options, vendor
from amp_conformance.plugin.options import Settings
from amp_conformance.properties.call_forms import FORMS, Lit, Many, Sizes
from amp_conformance.schema import oplist
from amp_conformance.schema.oplist import OpList, OpListError

FORMS_HOOK = "pytest_amp_conformance_property_forms"
WRAPPERS_HOOK = "pytest_amp_conformance_wrappers"
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
                           wrappers=wrappers(config, resolved.device))
        config.stash[_SETTINGS] = resolved
    return config.stash[_SETTINGS]


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
    """``strategies.FORMS`` merged with the results of the property-forms hooks, in call
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
                "expected a function of strategies.Sizes returning the argument tuple")
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


# -- the wrapper tier's declarations ------------------------------------------------------


def wrappers(config: pytest.Config, device: str) -> tuple[declare.Wrapper, ...]:
    """The declarations of the wrappers hooks (in call order), then of ``--wrapper``, each
    validated (:func:`declare.validate`); a bad one, or a name declared twice, is a usage
    error naming the hook implementation or the option, the wrapper and the field."""
    try:
        found = [(where, d) for where, result in vendor.hook_results(config, WRAPPERS_HOOK,
                                                                     device)
                 for d in _declarations(where, result)]
    except vendor.DeclarationError as exc:
        raise pytest.UsageError(f"amp-conformance: {exc}") from None
    for spec in config.getoption("amp_wrappers") or []:
        where = f"--wrapper {spec}"
        found += [(where, d) for d in _declarations(where, _load_wrapper(where, spec))]
    named: dict[str, str] = {}
    for where, decl in found:
        try:
            declare.validate(decl)
        except declare.DeclarationError as exc:
            raise pytest.UsageError(f"amp-conformance: {where}: {exc}") from None
        if decl.name in named:
            raise pytest.UsageError(f"amp-conformance: {where}: wrapper {decl.name!r}: name: "
                                    f"declared twice (also by {named[decl.name]})")
        named[decl.name] = where
    return tuple(decl for _, decl in found)


def _load_wrapper(where: str, spec: str) -> Any:
    """The object ``MODULE:NAME`` names (NAME may be dotted); a zero-argument callable that
    is no declaration is called."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise pytest.UsageError(f"amp-conformance: {where}: expected MODULE:NAME, e.g. "
                                "mylib.amp_decl:REGION")
    try:
        obj: Any = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise pytest.UsageError(f"amp-conformance: {where}: cannot load it: "
                                f"{type(exc).__name__}: {exc}") from None
    if callable(obj) and not isinstance(obj, (*_KINDS, list, tuple, type)):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - a library's factory may raise anything
            raise pytest.UsageError(f"amp-conformance: {where}: calling {name}() raised "
                                    f"{type(exc).__name__}: {exc}") from None
    return obj


_KINDS = (declare.RegionFactory, declare.ForwardDecorator)


def _declarations(where: str, result: Any) -> list[Any]:
    if isinstance(result, _KINDS):
        return [result]
    if isinstance(result, (list, tuple)):
        return list(result)
    raise pytest.UsageError(f"amp-conformance: {where}: gave {type(result).__name__} "
                            f"{reprlib.repr(result)}; expected a RegionFactory, a "
                            "ForwardDecorator or a list of them")
