"""The generated part of a document: text between a begin and an end marker, which a
command rewrites (docs/oplists.md's field reference, docs/versions.md's matrix table) and a
project test compares with what the code would write."""

from __future__ import annotations

from pathlib import Path


def section(text: str, begin: str, end: str) -> str | None:
    """The generated part of ``text`` (between the markers), or None without markers."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return None
    return text[start + len(begin):stop].strip("\n") + "\n"


def write(path: Path, begin: str, end: str, body: str) -> bool:
    """Replace the generated part of ``path`` by ``body``; whether it changed."""
    text = path.read_text(encoding="utf-8")
    if section(text, begin, end) is None:
        raise SystemExit(f"{path}: no generated section ({begin} ... {end})")
    start, stop = text.index(begin) + len(begin), text.index(end)
    new = f"{text[:start]}\n\n{body}\n{text[stop:]}"
    path.write_text(new, encoding="utf-8")
    return new != text
