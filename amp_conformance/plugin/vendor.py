"""What a backend vendor declares about its device: capabilities and expected failures.

Both come from files named on the command line (``--capabilities PATH.toml``,
``--xfail-file PATH``) and from the hooks of ``hookspecs.py``. They are validated while the
run's settings are resolved: a malformed file fails the run with a usage error that names
the file and the line or field.

Capabilities (a TOML file, every key optional)::

    device = "fakegpu"            # the device the file describes (checked against --device)
    [capabilities]
    cast_cache = false            # no autocast cast cache: its checks are skipped
    bitwise = false               # not bitwise reproducible: numerics compared with tolerances
    amp_dtypes = ["float16"]      # the autocast dtypes the device supports (no bfloat16)
    fused_optimizers = false      # no fused=True SGD/Adam/AdamW: GradScaler's fused checks skip
    sparse_grads = false          # no sparse gradients: GradScaler's sparse checks skip
    autograd = false              # no autograd through its tensors: backward checks skip
    threads = false               # its ops run in one thread: the thread checks skip
    float64 = false               # no float64 tensors (MPS): checks that need them skip
    step_boundary = "torch_xla:sync"  # a lazy device's end of a training step (below)
    [reasons]
    cast_cache = "autocast is registered from Python: no binding for cached_cast"

A lazy device (PyTorch/XLA) records ops into a graph it compiles when a value is read;
its training loops end every step with a call that cuts the graph there (``torch_xla.sync``,
``xm.mark_step``), so each step compiles once and is reused. ``step_boundary`` names that
call (``module:function``) and the checks that train for several steps make it where such
a loop would; without it every step's graph is new.

Expected failures (text): one test id (``test_policy[cpu-bfloat16-torch_16-mm]``) or node-id
prefix (``amp_conformance/suite/test_cast_cache.py::``) per line, ``# reason`` after it.
"""

from __future__ import annotations

import os
import reprlib
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from amp_conformance.checks import registry
from amp_conformance.core import backend, devices, sync
from amp_conformance.core.backend import BackendError
from amp_conformance.core.errors import describe_error
from amp_conformance.plugin.items import check_of
from amp_conformance.plugin.options import Settings

#: capability -> (type, default, what turning it off means)
CAPABILITIES: dict[str, tuple[type, Any, str]] = {
    "cast_cache": (bool, True, "device declares no cast cache"),
    "bitwise": (bool, True, "device declares no bitwise reproducibility"),
    "amp_dtypes": (list, None, "device declares no autocast in"),
    "fused_optimizers": (bool, True, "device declares no fused optimizers"),
    "sparse_grads": (bool, True, "device declares no sparse gradients"),
    "compile": (bool, True, "device declares no torch.compile support"),
    "checkpoint": (bool, True, "device declares no torch.utils.checkpoint support"),
    "autograd": (bool, True, "device declares no autograd through its tensors"),
    "threads": (bool, True, "device declares its ops run only in the thread that set it up"),
    "float64": (bool, True, "device declares no float64 tensors"),
    "step_boundary": (str, None, "device declares no step boundary"),
}
FILE_KEYS = ("device", "capabilities", "reasons")
_AMP_DTYPES = ("bfloat16", "float16")


class DeclarationError(ValueError):
    """A malformed capabilities or expected-failures declaration."""


class AmpConformanceWarning(pytest.PytestWarning):
    """A vendor declaration that has no effect (e.g. an expected failure matching no test)."""


# -- capabilities --------------------------------------------------------------------


@dataclass(frozen=True)
class Capabilities:
    """The device's declared capabilities; what is not declared is assumed present."""

    values: Mapping[str, Any] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    #: capability -> where it was declared (a file, or a hook)
    sources: Mapping[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Any:
        return self.values.get(name, CAPABILITIES[name][1])

    @property
    def cast_cache(self) -> bool:
        return bool(self.get("cast_cache"))

    @property
    def bitwise(self) -> bool:
        return bool(self.get("bitwise"))

    @property
    def step_boundary(self) -> str | None:
        return self.get("step_boundary")

    @property
    def amp_dtypes(self) -> tuple[str, ...] | None:
        value = self.get("amp_dtypes")
        return None if value is None else tuple(value)

    def why(self, name: str) -> str:
        """The message of a check skipped because ``name`` is absent."""
        text = CAPABILITIES[name][2]
        reason = self.reasons.get(name)
        return f"{text} ({reason})" if reason else text

    def skip_reason(self, check: str | None) -> str | None:
        """Why the check ``check`` (an amp_check name) does not apply, or None."""
        needed = registry.REGISTRY[check].capability if check in registry.REGISTRY else None
        if needed is not None and not self.get(needed):
            return self.why(needed)
        return None

    def as_json(self) -> dict[str, Any]:
        declared = {name: self.get(name) for name in CAPABILITIES}
        return {**declared, "reasons": dict(self.reasons), "sources": dict(self.sources)}


def _where(source: str, key: str | None) -> str:
    return f"{source}: field {key!r}" if key else source


def parse_capabilities(data: Any, source: str, device: str) -> tuple[dict, dict]:
    """Validate one declaration (a file's content or a hook's result): (values, reasons)."""
    if not isinstance(data, Mapping):
        raise DeclarationError(f"{source}: expected a table of {', '.join(FILE_KEYS)}, "
                               f"got {type(data).__name__}")
    unknown = sorted(set(data) - set(FILE_KEYS))
    if unknown:
        raise DeclarationError(f"{_where(source, unknown[0])}: unknown key; allowed: "
                               f"{', '.join(FILE_KEYS)}")
    declared_device = data.get("device")
    if declared_device is not None and declared_device != device:
        raise DeclarationError(f"{_where(source, 'device')}: describes {declared_device!r}, "
                               f"but the run checks {device!r}")
    values: dict[str, Any] = {}
    caps = data.get("capabilities", {})
    if not isinstance(caps, Mapping):
        raise DeclarationError(f"{_where(source, 'capabilities')}: expected a table")
    for name, value in caps.items():
        key = f"capabilities.{name}"
        if name not in CAPABILITIES:
            raise DeclarationError(f"{_where(source, key)}: unknown capability; known: "
                                   f"{', '.join(CAPABILITIES)}")
        kind = CAPABILITIES[name][0]
        if kind is bool and not isinstance(value, bool):
            raise DeclarationError(f"{_where(source, key)}: expected true or false, got {value!r}")
        if kind is list:
            if (not isinstance(value, (list, tuple)) or not value
                    or any(v not in _AMP_DTYPES for v in value) or len(set(value)) != len(value)):
                raise DeclarationError(
                    f"{_where(source, key)}: expected a non-empty list of distinct dtypes among "
                    f"{', '.join(_AMP_DTYPES)}, got {value!r}")
            value = list(value)
        if kind is str and not (isinstance(value, str) and backend.is_reference(value)):
            raise DeclarationError(f"{_where(source, key)}: expected 'module:function' (e.g. "
                                   f"'torch_xla:sync'), got {value!r}")
        values[name] = value
    reasons = data.get("reasons", {})
    if not isinstance(reasons, Mapping):
        raise DeclarationError(f"{_where(source, 'reasons')}: expected a table")
    for name, text in reasons.items():
        key = f"reasons.{name}"
        if name not in CAPABILITIES:
            raise DeclarationError(f"{_where(source, key)}: unknown capability; known: "
                                   f"{', '.join(CAPABILITIES)}")
        if not isinstance(text, str) or not text.strip():
            raise DeclarationError(f"{_where(source, key)}: expected a non-empty string")
    return values, dict(reasons)


def _read_text(path: str | Path, what: str, form: str) -> str:
    """A declaration file's text; else a one-line DeclarationError naming the file (a
    directory or a binary file given by mistake must not end in a traceback)."""
    a_what = f"{'an' if what[0] in 'aeiou' else 'a'} {what}"
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DeclarationError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise DeclarationError(f"{path}: is a directory, not {a_what}") from None
    except UnicodeDecodeError as exc:
        raise DeclarationError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                               f"{a_what} is {form}") from None
    except OSError as exc:
        raise DeclarationError(f"{path}: cannot be read: {exc.strerror or exc}") from None


def read_capabilities(path: str | Path) -> dict[str, Any]:
    """The content of a capabilities file (not yet validated); for hooks that read one."""
    text = _read_text(path, "capabilities file", "a UTF-8 TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # the message names the line and column
        raise DeclarationError(f"{path}: not valid TOML: {exc}") from None


def hook_results(config: pytest.Config, name: str, device: str) -> list[tuple[str, Any]]:
    """``(where, result)`` of each implementation of the hook ``name`` that returned
    something, in pluggy's call order. Each is called on its own, so a result of the wrong
    type, or an exception, is reported naming the plugin (a conftest's path, a plugin's
    name) rather than as a traceback."""
    impls = [i for i in getattr(config.hook, name).get_hookimpls()
             if not (i.wrapper or i.hookwrapper)]
    found: list[tuple[str, Any]] = []
    for impl in reversed(impls):  # pluggy calls the last registered first
        others = [i.plugin for i in impls if i.plugin is not impl.plugin]
        where = f"{impl.plugin_name}: hook {name}"
        caller = config.pluginmanager.subset_hook_caller(name, others)
        try:
            results = caller(config=config, device=device)
        except pytest.UsageError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a vendor hook may raise anything
            raise DeclarationError(f"{where}: raised {describe_error(exc)}") from None
        found.extend((where, r) for r in results if r is not None)
    return found


def _hook_paths(where: str, result: Any) -> list[str]:
    """A path-list hook's result as strings; a str is no list of paths (it would be
    iterated character by character)."""
    if not isinstance(result, (list, tuple)):
        raise DeclarationError(f"{where}: returned {type(result).__name__} "
                               f"{reprlib.repr(result)}; expected a list of paths "
                               "(str or pathlib.Path), or None")
    for i, value in enumerate(result):
        if not isinstance(value, (str, os.PathLike)):
            raise DeclarationError(f"{where}: element {i} of the returned list is "
                                   f"{type(value).__name__} {reprlib.repr(value)}; expected "
                                   "a path (str or pathlib.Path)")
    return [str(p) for p in result]


def resolve_capabilities(config: pytest.Config, device: str) -> Capabilities:
    """Merge the hooks' declarations, then the ``--capabilities`` files (later wins)."""
    declarations: list[tuple[str, Any]] = []
    for where, result in hook_results(config, "pytest_amp_conformance_capabilities", device):
        if not isinstance(result, Mapping):
            raise DeclarationError(f"{where}: returned {type(result).__name__} "
                                   f"{reprlib.repr(result)}; expected a dict shaped like a "
                                   f"--capabilities file (keys {', '.join(FILE_KEYS)}), or None")
        declarations.append((where, result))
    for path in config.getoption("amp_capabilities") or []:
        declarations.append((str(path), read_capabilities(path)))
    values: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    sources: dict[str, str] = {}
    for source, data in declarations:
        found, why = parse_capabilities(data, source, device)
        values.update(found)
        reasons.update(why)
        sources.update({name: source for name in found})
    return Capabilities(values, reasons, sources)


# -- expected failures ---------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """One line of an expected-failures file."""

    pattern: str
    reason: str
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def matches(self, ids: list[str]) -> bool:
        """Whether the line is a prefix of any of an item's ids (see ``item_ids``)."""
        return any(s.startswith(self.pattern) for s in ids)


def item_ids(item: pytest.Item) -> list[str]:
    """The ids an expected-failures line may start: the test id (``test_policy[...]``),
    pytest's node id, and the node id from the package (``amp_conformance/suite/
    test_oplist.py::...``) and from the file name (``test_oplist.py::...``) — pytest's own
    node id depends on where the run starts and how the suite was named (``--pyargs``)."""
    ids = [item.name, item.nodeid]
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    module = getattr(getattr(item, "module", None), "__name__", None)
    if module:
        ids.append(f"{module.replace('.', '/')}.py::{rest}")
    ids.append(f"{item.path.name}::{rest}")
    return ids


def read_xfail_file(path: str | Path) -> list[Expectation]:
    text = _read_text(path, "expected-failures file", "UTF-8 text")
    found: list[Expectation] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        body, _, comment = raw.partition("#")
        body = body.strip()
        if not body:
            continue
        if len(body.split()) != 1:
            raise DeclarationError(
                f"{path}:{number}: expected one test id or node-id prefix per line "
                f"(a reason goes after '#'), got {body!r}")
        if body in seen:
            raise DeclarationError(f"{path}:{number}: {body!r} is already listed on line {seen[body]}")
        seen[body] = number
        found.append(Expectation(body, comment.strip() or "listed as an expected failure",
                                 str(path), number))
    return found


def xfail_files(config: pytest.Config, device: str) -> list[str]:
    paths: list[str] = []
    for where, result in hook_results(config, "pytest_amp_conformance_xfail_files", device):
        paths.extend(_hook_paths(where, result))
    paths.extend(str(p) for p in config.getoption("amp_xfail_files") or [])
    return paths


# -- the run's declarations ----------------------------------------------------------


@dataclass(frozen=True)
class Declarations:
    """Everything the vendor declared for this run."""

    capabilities: Capabilities
    expectations: tuple[Expectation, ...] = ()
    xfail_files: tuple[str, ...] = ()
    hook_oplists: tuple[str, ...] = ()


_DECLARATIONS = pytest.StashKey[Declarations]()
_UNMATCHED = pytest.StashKey[list]()


def declarations(config: pytest.Config) -> Declarations:
    """The run's declarations (resolved by ``apply``; empty when the suite is not run)."""
    return config.stash.get(_DECLARATIONS, Declarations(Capabilities()))


def setup_backend(config: pytest.Config) -> None:
    """Let the vendor's hook initialise its backend before the device is validated; a hook
    that raises is a usage error naming it (a backend that cannot start checks nothing)."""
    device = config.getoption("amp_device")
    try:
        hook_results(config, "pytest_amp_conformance_setup", device)
        answers = hook_results(config, "pytest_amp_conformance_device_available", device)
    except DeclarationError as exc:
        raise _usage(exc) from None
    for where, answer in answers:  # the last implementation called wins
        present, why = answer if isinstance(answer, tuple) and len(answer) == 2 else (answer, "")
        if not isinstance(present, bool) or not isinstance(why, str):
            raise _usage(DeclarationError(
                f"{where}: returned {reprlib.repr(answer)}; expected True, False, "
                "(present, why) or None"))
        devices.declare_availability(device, present, why or where)
        config.add_cleanup(lambda: devices.declare_availability(device, None))


def _usage(exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"amp-conformance: {exc}")


def apply(config: pytest.Config, settings: Settings) -> Settings:
    """Resolve the declarations and fold them into the run's settings.

    Raises pytest.UsageError for a malformed declaration, or for options that contradict
    one (``--amp-dtype bfloat16`` on a device that declares no bfloat16,
    ``--numerics bitwise`` on one that declares no bitwise reproducibility).
    """
    device = settings.device
    try:
        caps = resolve_capabilities(config, device)
        files = xfail_files(config, device)
        expectations = [e for path in files for e in read_xfail_file(path)]
        oplists = [p for where, result in hook_results(config, "pytest_amp_conformance_oplists",
                                                       device) for p in _hook_paths(where, result)]
    except DeclarationError as exc:
        raise _usage(exc) from None

    dtypes = settings.amp_dtypes
    if caps.amp_dtypes is not None:
        declared = set(caps.amp_dtypes)
        where = caps.sources.get("amp_dtypes", "capabilities")
        refused = [d for d in dtypes if devices.dtype_name(d) not in declared]
        if refused and config.getoption("amp_dtype"):
            raise pytest.UsageError(
                f"amp-conformance: {device} declares autocast dtypes "
                f"{', '.join(caps.amp_dtypes)} only ({where}); --amp-dtype asked for "
                f"{', '.join(map(devices.dtype_name, refused))}")
        dtypes = tuple(d for d in dtypes if devices.dtype_name(d) in declared)
        if not dtypes:
            raise pytest.UsageError(
                f"amp-conformance: {device} declares autocast dtypes {', '.join(caps.amp_dtypes)} "
                f"({where}), none of which torch.autocast accepts for it")
    numerics = settings.numerics
    if not caps.bitwise:
        if config.getoption("amp_numerics") == "bitwise":
            raise pytest.UsageError(
                f"amp-conformance: {device} declares its results are not bitwise reproducible "
                f"({caps.sources.get('bitwise', 'capabilities')}); drop --numerics bitwise "
                "(numerics are compared with tolerances)")
        numerics = "close"
    if settings.fake and not caps.get("float64"):  # its fake refuses what it lacks
        where = caps.sources.get("float64", "capabilities")
        devices.declare_refusal(device, torch.float64,
                                f"{device} has no float64 tensors (declared in {where}: "
                                f"{caps.why('float64')})")
        config.add_cleanup(lambda: devices.declare_refusal(device, torch.float64, None))
    if caps.step_boundary is not None and not settings.fake:
        where = _where(caps.sources.get("step_boundary", "capabilities"),
                       "capabilities.step_boundary")
        try:
            sync.declare_step_boundary(device, backend.resolve(caps.step_boundary))
        except BackendError as exc:
            raise _usage(DeclarationError(f"{where}: {exc}")) from None
        config.add_cleanup(lambda: sync.declare_step_boundary(device, None))
    config.stash[_DECLARATIONS] = Declarations(caps, tuple(expectations), tuple(files),
                                               tuple(oplists))
    extra = tuple(dict.fromkeys(str(Path(p)) for p in [*oplists, *settings.oplists]))
    return replace(settings, amp_dtypes=dtypes, numerics=numerics, oplists=extra)


# -- collection ----------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    # tryfirst: before -k/-m deselect, so an expectation matches against the whole suite
    if _DECLARATIONS not in config.stash:
        return
    decl = config.stash[_DECLARATIONS]
    matched: set[Expectation] = set()
    for item in items:
        check = check_of(item)
        if check is None:
            continue
        reason = decl.capabilities.skip_reason(check) or next(
            (decl.capabilities.why(name) for marker in item.iter_markers("amp_needs")
             for name in marker.args if not decl.capabilities.get(name)), None)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
        ids = item_ids(item)
        hits = [e for e in decl.expectations if e.matches(ids)]
        if hits:
            best = max(hits, key=lambda e: len(e.pattern))
            matched.update(hits)
            item.add_marker(pytest.mark.xfail(reason=f"{best.reason} [{best.where}]", strict=True))
    unmatched = [e for e in decl.expectations if e not in matched]
    config.stash[_UNMATCHED] = unmatched
    for e in unmatched:
        warnings.warn(AmpConformanceWarning(
            f"expected failure {e.pattern!r} ({e.where}) matches no test of this run"), stacklevel=1)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and _UNMATCHED in session.config.stash:
        # an xdist worker: tell the controller, which collects nothing itself
        workeroutput["amp_xfail_unmatched"] = [e.where for e in session.config.stash[_UNMATCHED]]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: an expectation is unmatched only if no worker matched it."""
    reported = getattr(node, "workeroutput", {}).get("amp_xfail_unmatched")
    config = node.config
    if reported is None or _DECLARATIONS not in config.stash:
        return
    previous = config.stash.get(_UNMATCHED, None)
    mine = [e for e in config.stash[_DECLARATIONS].expectations if e.where in set(reported)]
    config.stash[_UNMATCHED] = mine if previous is None else [e for e in previous if e in mine]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    unmatched = config.stash.get(_UNMATCHED, None)
    if unmatched:
        terminalreporter.write_sep("-", "amp-conformance: expected failures that match no test")
        for e in unmatched:
            terminalreporter.write_line(f"{e.where}: {e.pattern}")
