"""PyTorch's OpInfo database of the running release: the ops, their samples and forms.

``op_db`` is internal to PyTorch and changes between releases, so everything here reads
it defensively: the import happens once per process and only when the tier asks for it
(it costs seconds and needs the ``expecttest`` package), an OpInfo whose fields this code
cannot use is reported with the reason, and nothing here fails at import time.

Samples are drawn with a fixed seed inside a forked RNG (the global generator is left as
it was), so the k-th sample of an op is the same in every run, on every xdist worker and
in the reproduction a failure prints. A device faked through FakeTensorMode draws its
samples on cpu and gets them moved onto the fake device, strides kept (fake tensors carry
no values, and OpInfo's sample makers fill tensors in place, which a fake device without
the hardware refuses).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import itertools
import random
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from amp_conformance.checks import installed
from amp_conformance.core import rng
from amp_conformance.core.errors import describe_error

MODULE = "torch.testing._internal.common_methods_invocations"
#: the seed every op's samples are drawn with (its reproduction says so too)
SEED = 0
#: how many samples per op and build dtype (``--amp-opinfo-samples``): ``forms``, the
#: fewest that show every argument form (checks/opinfo/calls.py)
DEFAULT_SAMPLES = "forms"


#: what op_db's import needs beyond torch and this package's own dependencies (the
#: ``opinfo`` extra installs it)
NEEDS = ("expecttest",)


class OpDbUnavailable(RuntimeError):
    """The running torch's op_db cannot be imported (a usage error, naming the fix)."""


def _unavailable(exc: BaseException) -> OpDbUnavailable:
    hint = " (pip install expecttest)" if "expecttest" in str(exc) else ""
    return OpDbUnavailable(f"--amp-opinfo needs PyTorch's OpInfo database ({MODULE}), which "
                           f"does not import here: {describe_error(exc)}{hint}")


def check_installed() -> None:
    """op_db's module and what it needs are installed, without importing op_db (2.5 s
    here): the check of an xdist controller (:mod:`amp_conformance.checks.installed`)."""
    installed.check_installed((MODULE, *NEEDS), _unavailable)


@functools.cache
def op_db() -> tuple[Any, ...]:
    """Every OpInfo of the running release, in op_db's order (imported on first use)."""
    try:
        module = importlib.import_module(MODULE)
    except Exception as exc:  # noqa: BLE001 - any import failure is the same usage error
        raise _unavailable(exc) from None
    db = getattr(module, "op_db", None)
    if not isinstance(db, list) or not db:
        raise OpDbUnavailable(f"--amp-opinfo: {MODULE} has no op_db list in torch {torch.__version__}")
    return tuple(db)


@dataclass(frozen=True)
class OpRef:
    """An OpInfo by its name and variant: what an item's id says and a reproduction uses."""

    name: str
    variant: str = ""

    @property
    def id(self) -> str:
        return f"{self.name}-{self.variant}" if self.variant else self.name

    def lookup(self) -> Any:
        return _by_key()[(self.name, self.variant)]


@functools.cache
def _by_key() -> dict[tuple[str, str], Any]:
    return {(op.name, getattr(op, "variant_test_name", "") or ""): op for op in op_db()}


def refs() -> list[OpRef]:
    """Every op of op_db, in op_db's order (stable: an item per op and amp dtype)."""
    return [OpRef(name, variant) for name, variant in _by_key()]


def supported(op: Any, device: str) -> frozenset[torch.dtype]:
    """The dtypes OpInfo says the op supports on ``device`` (cpu's where it says nothing
    of the device type)."""
    for device_type in (device, "cpu"):
        try:
            return frozenset(op.supported_dtypes(device_type))
        except Exception:  # noqa: BLE001 - an older/newer OpInfo without that device type
            continue
    return frozenset()


def unusable(op: Any, device: str) -> str | None:
    """Why the tier cannot use this OpInfo on ``device``, or None."""
    if not callable(getattr(op, "sample_inputs", None)):
        return "not applicable: this release's OpInfo has no sample_inputs"
    if torch.float32 not in supported(op, device):
        return f"not applicable: OpInfo lists no float32 support for this op on {device}"
    return None


def draw_device(device: str, fake: bool) -> str:
    """Where samples are drawn: the device itself, or cpu for a faked device and for one
    whose generator cannot be seeded here (the samples are then moved onto it)."""
    return device if not fake and rng.can_fork(device) else "cpu"


@contextlib.contextmanager
def seeded(device: str) -> Iterator[None]:
    """Inside: the generators ``device`` draws from seeded with :data:`SEED`, and Python's
    ``random`` (sample makers draw keyword values from it: cosine_embedding_loss's margin,
    poisson_nll_loss's eps); after: as they were (``core.rng``)."""
    state = random.getstate()
    random.seed(SEED)
    try:
        with rng.seeded(device, SEED):
            yield
    finally:
        random.setstate(state)


def draw(op: Any, device: str, dtype: torch.dtype, limit: int | None) -> list[Any]:
    """The first ``limit`` samples (all with None) of ``op`` in ``dtype``, seeded."""
    with seeded(device), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sample makers warn (sparse CSR is beta, …)
        return list(itertools.islice(samples_of(op, device, dtype), limit))


def samples_of(op: Any, device: str, dtype: torch.dtype) -> Iterator[Any]:
    """The op's sample generator itself: ``OpInfo.sample_inputs`` wraps it in an iterator
    that reseeds torch before every sample from the calling test's name (found by walking
    the stack, a millisecond a sample), so the generator's own seeding here is ours."""
    func = getattr(op, "sample_inputs_func", None)
    if callable(func):
        return iter(func(op, device, dtype, False))
    return iter(op.sample_inputs(device, dtype))


def builds(op: Any, device: str, amp_dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """float32, and the autocast dtype itself where OpInfo says the op supports it
    (autocast passes a tensor already in its dtype on as it is, layout and all)."""
    return (torch.float32, amp_dtype) if amp_dtype in supported(op, device) else (torch.float32,)


def twins(sample: Any, noncontiguous: bool) -> Any:
    """The sample as drawn, or its non-contiguous twin."""
    return sample.noncontiguous() if noncontiguous else sample


def to_fake_device(sample: Any, device: str) -> Any:
    """The sample with every tensor replaced by an empty one on ``device`` (call inside
    FakeTensorMode), keeping shape, strides, dtype and requires_grad."""
    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.layout != torch.strided:
            raise ValueError(f"a {t.layout} tensor cannot be moved onto the fake {device}")
        moved = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
        return moved.requires_grad_(t.requires_grad)
    return sample.transform(move)


def to_device(sample: Any, device: str) -> Any:
    """The sample, drawn on cpu, with every tensor copied onto the real ``device``."""
    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().to(device).requires_grad_(t.requires_grad)
    return sample.transform(move)
