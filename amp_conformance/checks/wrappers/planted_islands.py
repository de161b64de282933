"""Planted float32 islands of the shapes library code has (the declarations
``planted.island_region``, ``planted.island_before`` and ``planted.island_arguments`` of
``planted.PLANTED``), sound until a mutant plants a broken implementation (:func:`plant`),
and a region runner that leaves its region open when the body raises.

- ``island_region``: a float32 core (a Cholesky factor) whose result goes on in the
  caller's region (an einsum in the region's dtype): ``ending="region"``,
  ``returns="region"``.
- ``island_before``: work before the core in the input's dtype (centring), then the
  float32 core: ``before="input"``.
- ``island_arguments``: a second argument the library only ever makes in float32 (the exp
  of a float32 parameter), which the core computes in: ``arguments=(None, torch.float32)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from amp_conformance.checks.wrappers.declare import Float32Island, tensor

#: an island needs no hardware: each runs on cpu and on a fake cuda device
DEVICES = ("cpu", "cuda")


def _off(x: torch.Tensor) -> torch.autocast:
    return torch.autocast(x.device.type, enabled=False)


def _factor(x: torch.Tensor) -> torch.Tensor:
    a = x.float() @ x.float().mT
    return torch.linalg.cholesky(a + 8 * torch.eye(a.shape[-1], device=x.device))


def cholesky_then_region(x: torch.Tensor) -> torch.Tensor:
    """The Cholesky factor of ``x xᵀ + 8 I`` in float32, then applied to ``x`` in the
    caller's region."""
    with _off(x):
        factor = _factor(x)
    return torch.einsum("ij,jk->ik", factor, x)


def cholesky_in_region(x: torch.Tensor) -> torch.Tensor:
    """The bug: the core's product computed in the caller's region (autocast never left)."""
    a = x @ x.mT
    factor = torch.linalg.cholesky(a.float() + 8 * torch.eye(a.shape[-1], device=x.device))
    return torch.einsum("ij,jk->ik", factor, x)


def ending_in_bfloat16(x: torch.Tensor) -> torch.Tensor:
    """The bug: the part after the core in a bfloat16 region of its own, whatever the
    caller's region (a float16 one, or a disabled one)."""
    with _off(x):
        factor = _factor(x)
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        return torch.einsum("ij,jk->ik", factor, x)


def centred_core(x: torch.Tensor) -> torch.Tensor:
    """Centring in the input's dtype, then a float32 core."""
    y = x - x.mean(-1, keepdim=True)
    with _off(x):
        y = y.float()
        return torch.softmax(y @ y.mT, dim=-1)


def projected_in_region(x: torch.Tensor) -> torch.Tensor:
    """The bug: the work before the core is a projection the caller's region runs in its
    own dtype, not the input's."""
    y = torch.nn.functional.linear(x, torch.eye(x.shape[-1], device=x.device))
    with _off(x):
        y = y.float()
        return torch.softmax(y @ y.mT, dim=-1)


def scaled_core(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """A core computing in its float32 scale's dtype."""
    with _off(x):
        y = x.to(scale.dtype) * scale
        return y @ y.mT


def scale_cast_down(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The bug: the float32 scale cast to the activation's dtype, the product computed
    there."""
    with _off(x):
        y = (x * scale.to(x.dtype)).float()
        return y @ y.mT


def leaves_open_on_raise(body: Callable[[], Any], precision: str, device: str) -> Any:
    """A runner in the manner of a training loop's callbacks: the region entered before the
    forward and left after it, with no ``finally``: when the forward raises, it stays open."""
    region = torch.autocast(device, dtype=getattr(torch, precision))
    region.__enter__()
    out = body()
    region.__exit__(None, None, None)
    return out


SOUND: dict[str, Callable] = {"island_region": cholesky_then_region,
                              "island_before": centred_core, "island_arguments": scaled_core}
_PLANTED: dict[str, Callable] = dict(SOUND)


def plant(**implementations: Callable) -> Callable[[], None]:
    """Plant broken implementations behind PLANTED; returns the undo."""
    _PLANTED.update(implementations)
    return lambda: _PLANTED.update(SOUND)


def _planted(slot: str) -> Callable[[str], Callable[..., Any]]:
    return lambda device: lambda *x: _PLANTED[slot](*x)


def _meta() -> dict[str, str]:
    return {"library": "torch", "version": torch.__version__}


def _scaled_inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    return tensor(4, 8, device=device), tensor(8, device=device, seed=6).exp()


PLANTED = [
    Float32Island("planted.island_region", devices=DEVICES, build=_planted("island_region"),
                  ending="region", returns="region", **_meta()),
    Float32Island("planted.island_before", devices=DEVICES, build=_planted("island_before"),
                  before="input", **_meta()),
    Float32Island("planted.island_arguments", devices=DEVICES,
                  build=_planted("island_arguments"), inputs=_scaled_inputs,
                  arguments=(None, torch.float32), **_meta()),
]
