"""Expected autocast messages, per torch version, from ``oplists/messages.toml``."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass

import torch

from amp_conformance.schema.oplist import OpListError, builtin_dir, release

_KEYS = {"id", "text", "match", "since", "until"}


@dataclass(frozen=True)
class Message:
    id: str
    text: str
    match: str = "exact"
    since: str | None = None
    until: str | None = None

    def applies(self, version: str) -> bool:
        v = release(version)
        return (self.since is None or v >= self.since) and (self.until is None or v < self.until)

    def matches(self, actual: str, **fields: str) -> bool:
        expected = self.text.format(**fields)
        return actual.startswith(expected) if self.match == "prefix" else actual == expected


@functools.cache
def _all() -> tuple[Message, ...]:
    path = builtin_dir() / "messages.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found = []
    for i, raw in enumerate(data.get("message", [])):
        mid = raw.get("id", f"#{i}")
        bad = set(raw) - _KEYS
        if bad:
            raise OpListError(path, mid, sorted(bad)[0], f"unknown field; allowed: {sorted(_KEYS)}")
        if not isinstance(raw.get("text"), str):
            raise OpListError(path, mid, "text", "missing message text")
        if raw.get("match", "exact") not in ("exact", "prefix"):
            raise OpListError(path, mid, "match", "expected 'exact' or 'prefix'")
        found.append(Message(**raw))
    return tuple(found)


def expected(message_id: str, version: str | None = None) -> Message | None:
    """The message recorded for the running torch, or None when none is recorded."""
    version = version or torch.__version__
    for message in _all():
        if message.id == message_id and message.applies(version):
            return message
    return None
