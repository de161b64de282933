"""A Case: one (device, autocast dtype, op-list entry) combination, a single generated item."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import torch

from amp_conformance.core import devices
from amp_conformance.core.target import Target
from amp_conformance.schema import argspec, oplist
from amp_conformance.schema.oplist import Entry


@dataclass(frozen=True)
class Case:
    """One (device, autocast dtype, entry) combination: a single generated test item."""

    target: Target
    amp_dtype: torch.dtype
    entry: Entry
    numerics: str = "bitwise"

    @property
    def id(self) -> str:
        dtype = devices.dtype_name(self.amp_dtype)
        return f"{self.target.device}-{dtype}-{self.entry.category}-{self.entry.id}"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.entry.id.encode()) & 0x7FFFFFFF

    def skip_reason(self, check: str | None = None) -> str | None:
        entry = self.entry
        gap = entry.version_gap()
        if gap:
            return gap
        name = devices.dtype_name(self.amp_dtype)
        if entry.amp_dtypes is not None and name not in entry.amp_dtypes:
            return f"not applicable: entry {entry.id} is listed for {', '.join(entry.amp_dtypes)} only"
        for skip in entry.skips:
            if skip.applies(self.amp_dtype, self.numerics, self.target.fake, check):
                return skip.describe(self.amp_dtype)
        return None

    def build_inputs(self) -> tuple[tuple, dict]:
        builder = argspec.Builder(self.target.device, self.amp_dtype, self.seed)
        args = tuple(builder.build(s) for s in self.entry.args)
        kwargs = {k: builder.build(s) for k, s in self.entry.kwargs.items()}
        return args, kwargs


@functools.cache
def load_oplist(device: str, extra: tuple[str, ...] = ()) -> oplist.OpList:
    """The device's merged op lists, loaded once per process (every check reads them)."""
    return oplist.load(device, extra)
