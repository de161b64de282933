"""The one comparison rule: bitwise, or close within tolerances, for outputs of any nesting."""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.core.casting import map_tensors, tensors_in
from amp_conformance.core.errors import ConformanceFailure, describe_error
from amp_conformance.core.modes import outside_modes


def tolerance_kwargs(numerics: str, tolerance: Any = None) -> dict[str, float]:
    """The rule every value comparison uses: ``bitwise`` is rtol = atol = 0; ``close`` is
    the entry's own ``{rtol, atol}`` if it sets one, else torch.testing.assert_close's
    per-dtype defaults."""
    if numerics == "bitwise":
        return {"rtol": 0.0, "atol": 0.0}
    return dict(tolerance) if tolerance is not None else {}


def compare(actual: Any, expected: Any, numerics: str, tolerance: Any, what: str) -> None:
    """Bitwise (default) or close comparison of two outputs of any nesting: each tensor is
    read back to the host through its backend, then compared there outside every user mode
    (a backend's tensors may compute only inside its modes; its comparisons are not under
    test)."""
    hosts = {**_read_back(actual), **_read_back(expected)}
    with outside_modes():
        _compare(actual, expected, numerics, tolerance, what, hosts)


def close(actual: Any, expected: Any, **tolerances: Any) -> str | None:
    """``torch.testing.assert_close`` of two outputs (tensors, or nested) on the host: None where they agree,
    else its message. Both are read back first: the message prints values, and printing a
    device's tensor calls the device's own ops (``abs``, comparisons) in its dtype, which a
    failing backend may lack; a tensor that cannot be read back is the item's failure."""
    hosts = {**_read_back(actual), **_read_back(expected)}
    with outside_modes():
        actual, expected = (map_tensors(lambda t: hosts.get(id(t), t), v)
                            for v in (actual, expected))
        if _identical(actual, expected):
            return None
        try:
            torch.testing.assert_close(actual, expected, **tolerances)
        except AssertionError as exc:
            return str(exc)
    return None


def _identical(actual: Any, expected: Any) -> bool:
    """Whether two host tensors certainly pass ``assert_close`` at any tolerance: plain
    dense tensors of the same dtype and shape whose elements are all equal (``torch.equal``,
    a hundredth of its cost). False decides nothing (a NaN, a subclass, a complex or
    sparse tensor): ``assert_close`` does, and words the failure."""
    return (type(actual) is torch.Tensor and type(expected) is torch.Tensor
            and actual.device.type == expected.device.type == "cpu"
            and actual.dtype == expected.dtype and actual.shape == expected.shape
            and actual.layout == expected.layout == torch.strided
            and not actual.is_complex() and torch.equal(actual, expected))


def _read_back(value: Any) -> dict[int, torch.Tensor]:
    """id -> a host copy of each tensor in ``value`` that is not on the host, read back
    through its backend (inside its modes: some backends compute only there); one that
    cannot be is a :class:`ConformanceFailure` (the item's, whatever the backend raised)."""
    with outside_modes():
        away = [t for t in tensors_in(value) if t.device.type != "cpu"]
    hosts = {}
    for t in away:
        try:
            hosts[id(t)] = t.detach().cpu()
        except Exception as exc:  # noqa: BLE001 - whatever the backend raises
            raise ConformanceFailure(f"a {str(t.dtype).removeprefix('torch.')} tensor of "
                                     f"{t.device} could not be read back to the host: "
                                     f"{describe_error(exc, 200)}") from exc
    return hosts


def _compare(actual: Any, expected: Any, numerics: str, tolerance: Any, what: str,
             hosts: dict[int, torch.Tensor]) -> None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise ConformanceFailure(f"{what}: got {type(actual).__name__}, expected a tensor")
        if actual.device != expected.device:
            raise ConformanceFailure(f"{what}: on {actual.device}, expected on {expected.device}")
        # compared on the host: the values are what count, and a device's comparison
        # kernels are not under test (XLA lowers no complex isclose)
        host, wanted = hosts.get(id(actual), actual), hosts.get(id(expected), expected)
        try:
            if not _identical(host, wanted):
                torch.testing.assert_close(host, wanted, equal_nan=True,
                                           **tolerance_kwargs(numerics, tolerance))
        except AssertionError as exc:
            mode = "bitwise" if numerics == "bitwise" else "within tolerance"
            raise ConformanceFailure(f"{what}: not equal ({mode}):\n{exc}") from None
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise ConformanceFailure(f"{what}: got {_short(actual)}, expected {len(expected)} "
                                     "outputs")
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _compare(a, e, numerics, tolerance, f"{what}[{i}]", hosts)
    elif isinstance(expected, dict):
        if not isinstance(actual, dict) or list(actual) != list(expected):
            raise ConformanceFailure(f"{what}: got {_keys(actual)}, expected {_keys(expected)}")
        for key, e in expected.items():
            _compare(actual[key], e, numerics, tolerance, f"{what}[{key!r}]", hosts)
    elif actual != expected:
        raise ConformanceFailure(f"{what}: got {_short(actual)}, expected {_short(expected)}")


def _short(value: Any) -> str:
    """A bounded description that asks no device for anything (a tensor's repr would)."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return f"a {dtype} tensor of shape {tuple(value.shape)} on {value.device}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    text = repr(value)
    return text if len(text) <= 120 else text[:119] + "…"


def _keys(value: Any) -> str:
    return f"keys {list(value)}" if isinstance(value, dict) else type(value).__name__


def compare_meta(actual: Any, expected: Any, what: str) -> None:
    """Without values (fake tensors): outputs agree in structure, dtype and shape."""
    a, e = list(tensors_in(actual)), list(tensors_in(expected))
    if [(t.dtype, tuple(t.shape)) for t in a] != [(t.dtype, tuple(t.shape)) for t in e]:
        raise ConformanceFailure(
            f"{what}: outputs differ: {[(t.dtype, tuple(t.shape)) for t in a]} vs "
            f"{[(t.dtype, tuple(t.shape)) for t in e]}"
        )
