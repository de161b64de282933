"""``python -m amp_conformance review LIST.toml [--accept KEY|ID ...] [--keep KEY|ID ...]``:
the departures ``discover`` left for a person to decide, listed in groups and decided.

``discover`` writes each departure from the reference as a ``# REVIEW <id>:`` block: the
reference's expectation stays the active entry (so the departure fails until someone
decides), and what the device did follows, commented out. Without options this command
lists the blocks grouped by what the reference expects against what the device did, per
autocast dtype (:mod:`amp_conformance.tools.review_groups`). ``--accept`` takes the
device's observed entries, ``--keep`` keeps the reference's expectation (the departure stays
a failure: a kernel to fix, or, with ``--xfail-file PATH``, an expected failure declared);
both take a group's key or ids (shell patterns). Accepting what is itself a failure (an
error, a missing kernel, values departing from the control) is refused without
``--accept-failures``, so that no pattern writes a bug into the list unnoticed. Each decided
block keeps a comment of what the other side was, and the list is rewritten in place
(``--out`` elsewhere) only once it loads. Exit status: 0, or 2 on bad input.
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
from amp_conformance.tools import review_groups as groups

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

    @property
    def reference_table(self) -> dict:
        return groups.table(self.active)

    @property
    def seen(self) -> list[groups.Seen]:
        """What the device did, per departing autocast dtype."""
        return groups.seen(self.what, [groups.table(o) for o in self.observed])


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


def accepted(block: Block, failure: str = "") -> list[str]:
    """The block once the device's observed behaviour is taken; ``failure`` (why that
    behaviour is a failure, taken with --accept-failures) is recorded in the comment and
    in each entry's note."""
    if not block.observed:
        raise ReviewError(f"the REVIEW block of {block.id!r} has no observed entry to accept "
                          f"(the device raised, or the block was edited): use --keep")
    expectation = "; ".join(line for line in block.active[1:] if not line.startswith(
        ("id = ", "op = ", "args = ", "note = ")))
    taken = (f"accepted what the device does, a failure ({failure}; --accept-failures)"
             if failure else "accepted what the device does")
    lines = [f"# reviewed {block.id}: {taken} ({block.what}); {block.reference} expects: "
             f"{expectation}"]
    for entry in block.observed:
        if failure:
            note = groups.table(entry).get("note", "")
            entry = tuple(_note(entry, f"{note}; accepted in review as a failure: {failure}"))
        lines += entry
    return lines


def failure(block: Block) -> str:
    """Why the device's observed behaviour for ``block`` is a failure ("" when it is not)."""
    by_reason: dict[str, list[str]] = {}
    for s in block.seen:
        if s.failure:
            by_reason.setdefault(s.failure, []).append(s.dtype)
    return "; ".join(f"{', '.join(dtypes)}: {why}" for why, dtypes in by_reason.items())


def kept(block: Block) -> list[str]:
    """The block once the reference's expectation is kept (the departure stays a failure)."""
    lines = [f"# reviewed {block.id}: {block.reference}'s expectation kept ({block.what})",
             *_note(block.active, f"reviewed: {block.what}; {block.reference}'s expectation "
                                  "kept")]
    for entry in block.observed:
        lines += ["# observed, not taken:", *(f"# {line}" for line in entry)]
    return lines


def _select(patterns: list[str], found: list[Block], path: str) -> set[str]:
    """The ids that ``patterns`` name: a group's key (``lower/unchanged-no-kernel``) names
    its entries, anything else is a shell pattern of ids. One that names nothing left to
    review is an error naming what there is."""
    ids = [b.id for b in found]
    keys = {g.key: g for g in groups.group(found)}
    chosen: set[str] = set()
    for pattern in patterns:
        if "/" in pattern:
            if pattern not in keys:
                shown = ", ".join(keys) or "none is left"
                raise ReviewError(f"{path}: no group left to review is {pattern!r}; "
                                  f"groups: {shown}")
            chosen.update(keys[pattern].ids)
            continue
        matched = fnmatch.filter(ids, pattern)
        if not matched:
            shown = ", ".join(ids[:12]) + (", …" if len(ids) > 12 else "")
            raise ReviewError(f"{path}: no entry left to review matches {pattern!r}"
                              + (f"; to review: {shown}" if ids else "; none is left"))
        chosen.update(matched)
    return chosen


def decide(lines: list[str], accept: list[str], keep: list[str], path: str = "",
           accept_failures: bool = False) -> tuple[list[str], dict[str, list[str]]]:
    """The list's lines with the blocks that ``accept`` or ``keep`` name (group keys or
    shell patterns of ids; keep wins) decided, and what each decision took: "accepted",
    "kept", "failures" (accepted although a failure) and "xfail" (the expected-failure
    lines of the kept). Accepting a failure needs ``accept_failures``."""
    found = blocks(lines, path)
    to_keep = _select(keep, found, path)
    to_accept = _select(accept, found, path) - to_keep
    failing = {b.id: failure(b) for b in found if b.id in to_accept and failure(b)}
    if failing and not accept_failures:
        named = "; ".join(f"{i} ({why})" for i, why in failing.items())
        raise ReviewError(
            f"{path}: refused to accept {len(failing)} entr{'y' if len(failing) == 1 else 'ies'}"
            f" whose observed behaviour is a failure: {named}. Keep the reference with --keep "
            "(and declare the expected failure: --xfail-file PATH), or take them as they are "
            "with --accept-failures (the list's comment records it)")
    taken: dict[str, list[str]] = {"accepted": [], "kept": [], "failures": [], "xfail": []}
    out, last = [], 0
    for block in found:
        if block.id in to_keep:
            decided, kind = kept(block), "kept"
            taken["xfail"] += groups.xfail_lines(block, lines, block.reference)
        elif block.id in to_accept:
            decided, kind = accepted(block, failing.get(block.id, "")), "accepted"
            if block.id in failing:
                taken["failures"].append(block.id)
        else:
            continue
        out += lines[last:block.start] + decided
        last = block.end
        taken[kind].append(block.id)
    return out + lines[last:], taken


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("oplist", metavar="LIST.toml", help="an op list written by discover")
    parser.add_argument("--accept", action="append", default=[], metavar="KEY|ID",
                        help="take the device's observed behaviour: a group's key as listed "
                             "(lower/unchanged-no-kernel) or entry ids (a shell pattern: "
                             "'conv*'); repeatable")
    parser.add_argument("--keep", action="append", default=[], metavar="KEY|ID",
                        help="keep the reference's expectation (a group's key or ids): the "
                             "departure stays a failure to fix or declare (wins over "
                             "--accept); repeatable")
    parser.add_argument("--accept-failures", action="store_true",
                        help="let --accept take entries whose observed behaviour is a failure "
                             "(an error, a missing kernel, values departing from the "
                             "control); the list's comment records it")
    parser.add_argument("--xfail-file", metavar="PATH",
                        help="append the expected failures of the entries --keep keeps "
                             "(their policy items, one per autocast dtype) to this "
                             "expected-failures file (--xfail-file of a run)")
    parser.add_argument("--out", metavar="PATH.toml",
                        help="write the reviewed list here (default: in place)")


def _listing(lines: list[str], path: Path) -> None:
    found = blocks(lines, str(path))
    grouped = groups.group(found)
    if found:
        device, reference = groups.list_device(lines), found[0].reference
        print(f"review {path}: {len(found)} departures of {device} from {reference}, in "
              f"{len(grouped)} groups: {reference}'s expectation against what {device} does, "
              f"per autocast dtype")
        print("\n".join(groups.render(grouped, str(path), lines, device, reference)))
        print()
    print(groups.summary(grouped, str(path)))


def _write_xfails(path: Path, xfails: list[str], device: str) -> int:
    """Append the lines whose test id the file does not list yet; how many were added."""
    text = path.read_text(encoding="utf-8") if path.exists() else (
        f"# Expected failures of {device}: entries whose reference expectation was kept by\n"
        "# python -m amp_conformance review --keep (pass this file as --xfail-file).\n")
    listed = {line.split("#")[0].strip() for line in text.splitlines()}
    new = [x for x in xfails if x.split("#")[0].strip() not in listed]
    if new:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.rstrip("\n") + "\n" + "\n".join(new) + "\n", encoding="utf-8")
    return len(new)


def run(args: argparse.Namespace) -> int:
    path = Path(args.oplist)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        if not (args.accept or args.keep):
            if args.xfail_file or args.accept_failures:
                raise ReviewError("--xfail-file and --accept-failures go with a decision: "
                                  "--keep KEY|ID or --accept KEY|ID")
            _listing(lines, path)
            return 0
        decided, taken = decide(lines, args.accept, args.keep, str(path), args.accept_failures)
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
    left = blocks(decided)
    failures = f" ({len(taken['failures'])} as failures)" if taken["failures"] else ""
    print(f"review: accepted {len(taken['accepted'])}{failures}, kept {len(taken['kept'])}, "
          f"{len(left)} left to review; wrote {out}")
    if taken["xfail"] and args.xfail_file:
        added = _write_xfails(Path(args.xfail_file), taken["xfail"], groups.list_device(lines))
        print(f"review: {added} expected failures of the kept entries added to "
              f"{args.xfail_file} (their policy items; pass it as --xfail-file)")
    elif taken["xfail"]:
        print("review: the kept entries' policy items fail until fixed; to declare them, "
              "--xfail-file PATH writes these lines:")
        print("\n".join(f"  {line}" for line in taken["xfail"]))
    if left:
        print(groups.summary(groups.group(left), str(out)))
    return 0
