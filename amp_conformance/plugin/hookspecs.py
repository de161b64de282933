"""Hooks a backend vendor implements to adapt the suite to its device.

Implement them in the root ``conftest.py`` of the run or in a plugin (``-p my_plugin``, or a
``pytest11`` entry point): they are called while the run's settings are resolved, before
the session starts, so a conftest deeper in the tree is too late. Every hook receives the
pytest ``config`` and the device type under test; return ``None`` to add nothing.
See docs/vendor-guide.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

hookspec = pytest.hookspec


@hookspec
def pytest_amp_conformance_setup(config: pytest.Config, device: str) -> None:
    """Import and initialise the backend of ``device`` (once per process).

    Called before ``--backend-module`` modules are imported and before the device is
    validated, so a backend registered here is known to ``torch.autocast`` in time.
    """


@hookspec
def pytest_amp_conformance_device_available(config: pytest.Config, device: str
                                            ) -> bool | tuple[bool, str] | None:
    """Whether ``device`` is here, in the backend's own words: ``True``/``False``, or
    ``(present, why)``; None leaves the question to the suite.

    Without an answer the suite asks ``torch.<device>.is_available()`` where that module
    exists, else makes a one-element tensor on ``<device>:0``
    (:func:`amp_conformance.core.devices.availability`). Implement it for a backend that
    has neither, or whose probe would start more than it should. Called after
    ``pytest_amp_conformance_setup``; a later implementation's answer wins.
    """


@hookspec
def pytest_amp_conformance_capabilities(config: pytest.Config, device: str) -> dict[str, Any] | None:
    """What ``device`` can do, as a dict shaped like a ``--capabilities`` file.

    E.g. ``{"capabilities": {"cast_cache": False}, "reasons": {"cast_cache": "..."}}``.
    Results of several implementations are merged in call order; ``--capabilities``
    files given on the command line are applied after them and win.
    """


@hookspec
def pytest_amp_conformance_oplists(config: pytest.Config, device: str) -> list[str | Path] | None:
    """Extra op-list files for ``device`` (like ``--oplist``), merged before the
    command line's ``--oplist`` files."""


@hookspec
def pytest_amp_conformance_xfail_files(config: pytest.Config, device: str) -> list[str | Path] | None:
    """Expected-failures files for ``device`` (like ``--xfail-file``)."""


@hookspec
def pytest_amp_conformance_property_forms(config: pytest.Config, device: str
                                          ) -> dict[str, Callable[[Any], tuple]] | None:
    """How the policy properties call the device's own ops: ``{op_name: form}``.

    ``op_name`` is the ``op`` of the device's op-list entries; ``form`` takes an
    ``amp_conformance.checks.call_forms.Sizes`` (generated ``b, m, k, n, count``) and
    returns the argument tuple, exactly like the values of ``call_forms.FORMS``: a tensor
    as its shape (a tuple of ints), ``Many((shape, ...))`` for a list of tensors,
    ``Lit(value)`` for a literal. E.g. ``{"layer_norm": lambda s: ((s.m, s.n),
    Lit([s.n]))}``. Every policy whose op-list entries name the op gets a property item for
    it. Results of several implementations merge in call order, over the built-in FORMS
    (a later form of the same op wins).
    """


@hookspec
def pytest_amp_conformance_device_health(config: pytest.Config, device: str
                                         ) -> dict[str, Any] | Callable[[], None] | None:
    """How to tell that ``device`` is lost: unusable for the rest of the process (a CUDA
    device-side assert, a sticky error), so that no later item is blamed for it.

    Return ``{"probe": fn, "patterns": [regex, ...]}`` (either key may be left out) or the
    probe alone. ``fn()`` raises when the device is lost; it is run once before the first
    item and after every conformance item that ran, so it must be cheap (a synchronize and
    a tiny op). ``patterns`` are the backend's own words for a lost device, searched
    (case-insensitively) in an item's failure where no probe decides. Called once the
    items are collected (by the xdist controller at the session's start; it runs no probe).
    Without it, a real non-CPU device gets a synchronize and a tiny op, and CPU (or
    ``--fake``) nothing. See :mod:`amp_conformance.plugin.health`.
    """


@hookspec
def pytest_amp_conformance_wrappers(config: pytest.Config) -> Any:
    """Autocast wrappers of a library to check (the wrapper tier, like ``--wrapper``).

    Return a ``RegionFactory``, ``RegionRunner``, ``ForwardDecorator`` or ``Float32Island``
    of :mod:`amp_conformance.checks.wrappers`, a list of them, or None. They are validated
    with the run's settings: a malformed declaration, or a name declared twice, is a usage
    error naming the hook implementation, the wrapper and the field. Items are made only
    for wrappers that claim the run's device. See docs/library-guide.md.
    """
