"""``python -m amp_conformance review LIST.toml [--accept ID ...] [--keep ID ...]``: the
departures ``discover`` left for a person to decide, listed and decided.

``discover`` writes each departure from the reference as a ``# REVIEW <id>:`` block: the
reference's expectation stays the active entry (so the departure fails until someone
decides), and what the device did follows, commented out. Without options this command
lists the blocks. ``--accept`` takes the device's observed entries for the ids it names
(shell patterns: ``--accept 'conv*'``, ``--accept '*'``), ``--keep`` keeps the reference's
expectation (the departure stays a failure: a kernel to fix, or an expected failure to
declare). Each decided block keeps a comment of what the other side was, and the list is
rewritten in place (``--out`` elsewhere) only once it loads. Exit status: 0, or 2 on bad
input.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from amp_conformance.schema import oplist

_HEADER = re.compile(r"^# REVIEW (?P<id>\S+): (?P<what>.*?)\.?$")
OBSERVED = "# [[entry]]  (observed)"


@dataclass(frozen=True)
class Block:
    """One ``# REVIEW`` block of a discovered list: lines ``start`` to ``end`` (exclusive)."""

    id: str
    what: str  # "mydev departs from cuda (float16: unchanged)"
    start: int
    end: int
    active: tuple[str, ...]  # the reference's entry, as written
    observed: tuple[tuple[str, ...], ...]  # each observed entry, its comment marks removed

    @property
    def reference(self) -> str:
        found = re.search(r" departs from (\S+)", self.what)
        return found.group(1) if found else "the reference"


class ReviewError(ValueError):
    """A list whose review blocks cannot be read or decided."""


def blocks(lines: list[str], path: str = "") -> list[Block]:
    """The ``# REVIEW`` blocks of a list's lines, in file order."""
    found = []
    for start, line in enumerate(lines):
        header = _HEADER.match(line)
        if not header:
            continue
        end = start + 1
        while end < len(lines) and lines[end].strip() and not _HEADER.match(lines[end]):
            end += 1
        body = lines[start + 1:end]
        if "[[entry]]" not in body:
            raise ReviewError(f"{path}: line {start + 1}: the REVIEW block of "
                              f"{header['id']!r} has no active [[entry]]")
        first = body.index("[[entry]]")
        observed: list[list[str]] = []
        active: list[str] = []
        for number, text in enumerate(body[first:], start + first + 2):
            if text == OBSERVED:
                observed.append(["[[entry]]"])
            elif observed:
                if not text.startswith("# "):
                    raise ReviewError(f"{path}: line {number}: expected an observed entry's "
                                      f"commented line in the REVIEW block of "
                                      f"{header['id']!r}, got {text!r}")
                observed[-1].append(text[2:])
            else:
                active.append(text)
        found.append(Block(header["id"], header["what"], start, end, tuple(active),
                           tuple(tuple(o) for o in observed)))
    return found


def _note(lines: tuple[str, ...], note: str) -> list[str]:
    """An entry's lines with its ``note`` replaced (added where it has none)."""
    value = '"' + note.replace("\\", "\\\\").replace('"', '\\"') + '"'
    out = [line for line in lines if not line.startswith("note = ")]
    return [*out, f"note = {value}"]


def accepted(block: Block) -> list[str]:
    """The block once the device's observed behaviour is taken."""
    if not block.observed:
        raise ReviewError(f"the REVIEW block of {block.id!r} has no observed entry to accept "
                          f"(the device raised, or the block was edited): use --keep")
    expectation = "; ".join(line for line in block.active[1:] if not line.startswith(
        ("id = ", "op = ", "args = ", "note = ")))
    lines = [f"# reviewed {block.id}: accepted what the device does ({block.what}); "
             f"{block.reference} expects: {expectation}"]
    for entry in block.observed:
        lines += entry
    return lines


def kept(block: Block) -> list[str]:
    """The block once the reference's expectation is kept (the departure stays a failure)."""
    lines = [f"# reviewed {block.id}: {block.reference}'s expectation kept ({block.what})",
             *_note(block.active, f"reviewed: {block.what}; {block.reference}'s expectation "
                                  "kept")]
    for entry in block.observed:
        lines += ["# observed, not taken:", *(f"# {line}" for line in entry)]
    return lines


def decide(lines: list[str], accept: list[str], keep: list[str], path: str = ""
           ) -> tuple[list[str], dict[str, list[str]]]:
    """The list's lines with the blocks whose ids match ``accept`` or ``keep`` (shell
    patterns) decided, and which ids each decision took; a pattern that matches no block
    left to review is an error naming the ids there are."""
    found = blocks(lines, path)
    ids = [b.id for b in found]
    for pattern in [*accept, *keep]:
        if not fnmatch.filter(ids, pattern):
            shown = ", ".join(ids[:12]) + (", …" if len(ids) > 12 else "")
            raise ReviewError(f"{path}: no entry left to review matches {pattern!r}"
                              + (f"; to review: {shown}" if ids else "; none is left"))
    taken: dict[str, list[str]] = {"accepted": [], "kept": []}
    out, last = [], 0
    for block in found:
        if any(fnmatch.fnmatchcase(block.id, p) for p in keep):
            decided, kind = kept(block), "kept"
        elif any(fnmatch.fnmatchcase(block.id, p) for p in accept):
            decided, kind = accepted(block), "accepted"
        else:
            continue
        out += lines[last:block.start] + decided
        last = block.end
        taken[kind].append(block.id)
    return out + lines[last:], taken


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("oplist", metavar="LIST.toml", help="an op list written by discover")
    parser.add_argument("--accept", action="append", default=[], metavar="ID",
                        help="take the device's observed behaviour for these entries (a shell "
                             "pattern: 'conv*'; '*' for all); repeatable")
    parser.add_argument("--keep", action="append", default=[], metavar="ID",
                        help="keep the reference's expectation for these entries: the "
                             "departure stays a failure (wins over --accept); repeatable")
    parser.add_argument("--out", metavar="PATH.toml",
                        help="write the reviewed list here (default: in place)")


def run(args: argparse.Namespace) -> int:
    path = Path(args.oplist)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        if not (args.accept or args.keep):
            found = blocks(lines, str(path))
            for block in found:
                print(f"{block.id}: {block.what}")
            print(f"review: {len(found)} entries of {path} to review: take the device's "
                  "behaviour with --accept ID, keep the reference's with --keep ID")
            return 0
        decided, taken = decide(lines, args.accept, args.keep, str(path))
    except (OSError, ReviewError) as exc:
        print(f"amp-conformance review: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else path
    text = "\n".join(decided) + "\n"
    with tempfile.TemporaryDirectory() as scratch:  # only a list that loads replaces one
        trial = Path(scratch) / out.name
        trial.write_text(text, encoding="utf-8")
        try:
            oplist.parse_file(trial)
        except oplist.OpListError as exc:
            print(f"amp-conformance review: the reviewed list would not load, {path} is "
                  f"unchanged: {exc}", file=sys.stderr)
            return 2
    out.write_text(text, encoding="utf-8")
    left = len(blocks(decided))
    print(f"review: accepted {len(taken['accepted'])}, kept {len(taken['kept'])}, {left} left "
          f"to review; wrote {out}")
    return 0
