"""The wrapper tier's seam: ``--wrapper MODULE:NAME`` (repeatable) and the hook
``pytest_amp_conformance_wrappers``, each declaration validated (a bad one, or a name
declared twice, is a usage error naming the hook implementation or the option, the
wrapper and the field); a suite function has items only where a declared wrapper of its
kind claims the run's device; the report's Wrappers section."""

from __future__ import annotations

import importlib
import reprlib
import sys
from collections.abc import Mapping
from typing import Any

import pytest

from amp_conformance.checks.tier import Run, Tier
from amp_conformance.checks.wrappers import declare, report
from amp_conformance.checks.wrappers.cases import cases, not_applicable

CHECK = "wrappers"
HOOK = "pytest_amp_conformance_wrappers"
FIXTURE = "amp_wrapper_case"
#: the suite function of each declaration kind
FUNCTIONS = {"test_wrapper_region": declare.RegionFactory,
             "test_wrapper_runner": declare.RegionRunner,
             "test_wrapper_forward": declare.ForwardDecorator,
             "test_wrapper_island": declare.Float32Island,
             "test_wrapper_swap": declare.RegionSwap,
             "test_wrapper_predicate": declare.Predicate,
             "test_wrapper_scaler": declare.Scaler}
_KINDS = declare.KINDS


class WrapperTier(Tier):
    check = CHECK
    options = {"--wrapper": dict(
        dest="amp_wrappers", action="append", default=[], metavar="MODULE:NAME",
        help="check a library's autocast wrapper: NAME in MODULE is a RegionFactory, "
             "RegionRunner, ForwardDecorator, Float32Island, RegionSwap, Predicate or Scaler "
             "(amp_conformance.checks."
             "wrappers), a list of them, or a callable returning either; repeatable; opt-in "
             "(no wrapper item without it)")}

    def resolve(self, config: Any, run: Run) -> Mapping[str, Any]:
        found = [(where, d) for where, result in run.hooks(HOOK)
                 for d in _declarations(where, result)]
        for spec in config.getoption("amp_wrappers") or []:
            where = f"--wrapper {spec}"
            found += [(where, d) for d in _declarations(
                where, _load(where, spec, str(config.invocation_params.dir)))]
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
        for spec in config.getoption("amp_wrappers") or []:
            where = f"--wrapper {spec}"
            _claims_the_device(where, [d for w, d in found if w == where], run.device)
        return {"wrappers": tuple(decl for _, decl in found)}

    def enabled(self, settings: Any) -> bool:
        return any(settings.device in w.devices for w in settings.wrappers)

    def collects(self, settings: Any, function: str) -> bool:
        kind = FUNCTIONS.get(function)
        return any((kind is None or isinstance(w, kind)) and settings.device in w.devices
                   for w in settings.wrappers)

    def html(self, data: dict[str, Any]) -> str:
        return report.html_section(data)

    def markdown(self, data: dict[str, Any]) -> list[str]:
        return report.markdown_section(data)


def _claims_the_device(where: str, given: list[Any], device: str) -> None:
    """A ``--wrapper`` none of whose declarations claims the run's device would run nothing
    in silence: a usage error naming each one's devices."""
    if not given or any(device in d.devices for d in given):
        return
    claimed = "; ".join(f"{d.name}: {', '.join(d.devices)}" for d in given[:6])
    raise pytest.UsageError(f"amp-conformance: {where}: no wrapper it declares claims device "
                            f"{device!r} ({claimed}{'; ...' if len(given) > 6 else ''}): run "
                            "with --device one of theirs (add --fake for a device this "
                            "machine lacks)")


def params(metafunc: Any, settings: Any) -> list[Any]:
    """The declared wrappers' items of one suite function (its kind), the ones that do not
    apply marked skip with why."""
    kind = metafunc.definition.originalname.removeprefix("test_wrapper_")
    cache = settings.declarations.capabilities.cast_cache
    found = []
    for case in cases(settings.wrappers, settings.device, settings.amp_dtypes, settings.fake):
        if case.kind != kind:
            continue
        reason = not_applicable(case, settings.amp_dtypes, settings.fake, cache)
        marks = [pytest.mark.skip(reason=reason)] if reason else []
        found.append(pytest.param(case, id=case.id, marks=marks))
    return found


def _import(module: str, folder: str) -> Any:
    """``module``, looked for on ``sys.path`` and then in the folder pytest was started
    from (as ``python -m pytest`` would find it: a plain ``pytest`` does not look there)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0] or folder in sys.path:
            raise
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module.split(".")[0]:
            sys.path.remove(folder)
            raise ModuleNotFoundError(f"{exc} (looked on sys.path and in {folder})",
                                      name=exc.name) from None
        raise


def _load(where: str, spec: str, folder: str) -> Any:
    """The object ``MODULE:NAME`` names (NAME may be dotted); a zero-argument callable that
    is no declaration is called."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise pytest.UsageError(f"amp-conformance: {where}: expected MODULE:NAME, e.g. "
                                "mylib.amp_decl:REGION")
    try:
        obj: Any = _import(module, folder)
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


def _declarations(where: str, result: Any) -> list[Any]:
    if isinstance(result, _KINDS):
        return [result]
    if isinstance(result, (list, tuple)):
        return list(result)
    raise pytest.UsageError(f"amp-conformance: {where}: gave {type(result).__name__} "
                            f"{reprlib.repr(result)}; expected a RegionFactory, a "
                            "RegionRunner, a ForwardDecorator, a Float32Island, a RegionSwap, "
                            "a Predicate, a Scaler or a list of them")


TIER = WrapperTier()
PARAMS = {(FIXTURE,): params}
