"""The departures of a discovered list grouped for a person: by what the reference expects
against what the device was seen to do, per autocast dtype.

Ninety departures read one by one are not a review: most share one story (the device has no
autocast kernel where the reference casts), a few are failures whatever is decided (the
device raised, or its values depart from every control). A group shows the two sides per
autocast dtype, its entries and a command that reproduces one of them, under a short key
made of the two sides (``lower/unchanged-no-kernel``) that ``review --accept`` and ``--keep``
take, and that stays the same while entries of the group are decided.
"""

from __future__ import annotations

import re
import shlex
import textwrap
import tomllib
from dataclasses import dataclass
from typing import Any

from amp_conformance.core.errors import missing_kernel
from amp_conformance.schema.categories import CATEGORIES

#: what the reference's policy makes of the output, per autocast dtype
_EXPECTS = {
    "lower": "lower: outputs in {dtype}",
    "fp32": "fp32: outputs in float32",
    "fp32_opt_dtype": "fp32: computed in float32 (dtype=float32 passed)",
    "promote": "promote: outputs in the widest input type",
    "builtin_promote": "unchanged: as without autocast",
    "banned": "error: banned under autocast",
}
#: observed outcomes whose acceptance writes a failure into the list, and why
FAILURES = {
    "error": "raises under autocast (and not outside it)",
    "missing-kernel": "no kernel for the call under autocast",
    "values-differ": "values depart from the control with autocast off",
}


@dataclass(frozen=True)
class Seen:
    """What the device did to one entry under one autocast dtype (from discover's header)."""

    dtype: str
    policy: str  # lower, fp32, promote, unchanged, error, other
    detail: str  # discover's review note, or the error's words; "" when none

    @property
    def kind(self) -> str:
        """The outcome as a short word: the policy, with why the entry was flagged."""
        if self.policy == "error":
            return "missing-kernel" if missing_kernel(self.detail) else "error"
        if self.detail.startswith("entered no "):
            return f"{self.policy}-no-kernel"
        if self.detail.startswith("values differ"):
            return f"{self.policy}-values-differ"
        return self.policy

    @property
    def failure(self) -> str:
        """Why taking this as the device's policy writes a failure into the list ("" if not)."""
        for word, why in FAILURES.items():
            if self.kind == word or self.kind.endswith("-" + word):
                return why
        return ""

    def describe(self) -> str:
        words = {"unchanged": "unchanged: as without autocast", "other": "a dtype change "
                 "discover cannot name", "error": "error"}.get(self.policy, self.policy)
        if self.detail.startswith("values differ"):
            return f"{words}; values differ from the control with autocast off"
        return f"{words}; {self.detail}" if self.detail else words


def _split(text: str) -> list[str]:
    """``a (b; c); d`` -> ``["a (b; c)", "d"]``: split on ``; `` outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    return [*parts, text[start:]]


def seen(what: str, observed: list[dict[str, Any]]) -> list[Seen]:
    """The per-dtype observations of a block's header (``mydev departs from cuda (float16:
    unchanged (entered no ...); bfloat16: ...)``); an error's words come from the observed
    entry of that dtype."""
    found = re.search(r" departs from \S+ \((.*)\)$", what)
    if not found:
        return []
    out = []
    for part in _split(found.group(1)):
        dtype, _, rest = part.partition(": ")
        policy, _, detail = rest.partition(" (")
        detail = detail[:-1] if detail.endswith(")") else detail
        if policy == "error":
            detail = next((t.get("error", "") for t in observed
                           if dtype in t.get("amp_dtypes", [dtype])), detail)
        out.append(Seen(dtype, policy, detail))
    return out


def table(lines: tuple[str, ...]) -> dict[str, Any]:
    """One entry's lines (``[[entry]]`` first) as its table; {} where they do not parse."""
    try:
        return tomllib.loads("\n".join(lines))["entry"][0]
    except (tomllib.TOMLDecodeError, KeyError, IndexError):
        return {}


def reference_policy(active: dict[str, Any]) -> str:
    category = CATEGORIES.get(active.get("category", ""))
    return category.policy if category else "unknown"


def expects(active: dict[str, Any], dtype: str) -> str:
    """What the reference's entry expects under ``dtype``, in words."""
    policy = reference_policy(active)
    text = _EXPECTS.get(policy, policy).format(dtype=dtype)
    if "expect" in active:
        text += f" (expect = {active['expect']!r})"
    return f"{text} [{active.get('category', '?')}]"


@dataclass
class Group:
    """Departures that read the same: the reference's policy, and each dtype's outcome."""

    reference: str  # the reference's policy (lower, fp32, ...)
    seen: tuple[tuple[str, str], ...]  # (dtype, kind) per departing dtype
    key: str = ""
    blocks: list[Any] | None = None

    @property
    def failure(self) -> str:
        return next((s.failure for s in self.first_seen if s.failure), "")

    @property
    def first_seen(self) -> list[Seen]:
        return self.blocks[0].seen if self.blocks else []

    @property
    def ids(self) -> list[str]:
        return [b.id for b in self.blocks or ()]


def _key(reference: str, kinds: tuple[tuple[str, str], ...]) -> str:
    words = {k for _, k in kinds}
    if len(words) == 1:
        return f"{reference}/{words.pop()}"
    return f"{reference}/" + ",".join(f"{d}={k}" for d, k in kinds)


def group(found: list[Any]) -> list[Group]:
    """The blocks grouped by (reference policy, outcome per dtype), largest group first.
    Two groups whose outcomes read alike under different dtypes get the dtypes in the key."""
    groups: dict[tuple, Group] = {}
    for block in found:
        kinds = tuple((s.dtype, s.kind) for s in block.seen)
        signature = (reference_policy(block.reference_table), kinds)
        if signature not in groups:
            groups[signature] = Group(signature[0], kinds, blocks=[])
        groups[signature].blocks.append(block)
    keys: dict[str, list[Group]] = {}
    for g in groups.values():
        keys.setdefault(_key(g.reference, g.seen), []).append(g)
    for key, same in keys.items():
        for g in same:
            g.key = key if len(same) == 1 else f"{key}@" + ",".join(d for d, _ in g.seen)
    return sorted(groups.values(), key=lambda g: (-len(g.ids), g.key))


def header_command(lines: list[str]) -> tuple[list[str], bool]:
    """The backend modules and ``--fake`` of the discover command the list's first line
    records (empty, False when it records none)."""
    found = re.search(r"`(python -m amp_conformance discover [^`]*)`", lines[0] if lines else "")
    words = shlex.split(found.group(1)) if found else []
    modules = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--backend-module"]
    return modules, "--fake" in words


def list_device(lines: list[str]) -> str:
    return next((m.group(1) for line in lines
                 if (m := re.match(r'^device = "([^"]*)"', line))), "DEVICE")


def reproduction(block: Any, path: str, lines: list[str]) -> str:
    """A command that runs the suite's per-entry items of ``block`` under its first departing
    dtype: the reference's expectation is still active, so the items fail showing both sides
    and the suite's own reproduction of the call."""
    modules, fake = header_command(lines)
    device = list_device(lines)
    dtype = block.seen[0].dtype if block.seen else "float16"
    item = f"{device}-{dtype}-{block.reference_table.get('category', '')}-{block.id}]"
    words = ["python", "-m", "amp_conformance", "run", "--",
             *(w for m in modules for w in ("--backend-module", m)), "--device", device,
             *(["--fake"] if fake else []), f"--oplist={path}", "-q", "-k", item]
    return shlex.join(words)


def xfail_lines(block: Any, lines: list[str], reference: str) -> list[str]:
    """The expected-failures lines (``--xfail-file``) of a block whose reference is kept:
    its policy item under each departing dtype, which fails by construction (discover found
    the dtypes or the kernel entry the reference expects missing there)."""
    device = list_device(lines)
    category = block.reference_table.get("category", "")
    return [f"test_policy[{device}-{s.dtype}-{category}-{block.id}]  # {reference}'s "
            f"expectation kept in review; {device}: {s.describe()}" for s in block.seen]


def render(groups: list[Group], path: str, lines: list[str], device: str, reference: str
           ) -> list[str]:
    """The listing: per group, the two sides per dtype, the count, the entries, a command
    that reproduces the first; then what is left to decide."""
    out = []
    for g in groups:
        first = g.blocks[0]
        out += ["", f"[{g.key}]  {len(g.ids)} entr{'y' if len(g.ids) == 1 else 'ies'}"]
        width = max(len(s.dtype) for s in first.seen) if first.seen else 8
        ours, theirs = f"{reference} expects", f"{device} does"
        label = max(len(ours), len(theirs))
        for s in first.seen:
            out.append(f"  {s.dtype:<{width}}  {ours:<{label}}  "
                       f"{expects(first.reference_table, s.dtype)}")
            out.append(f"  {'':<{width}}  {theirs:<{label}}  {s.describe()}")
        if g.failure:
            out.append(f"  a failure if accepted ({g.failure}): --keep, or --accept-failures")
        out += textwrap.wrap(", ".join(g.ids), 96, initial_indent="  entries: ",
                             subsequent_indent="    ", break_on_hyphens=False)
        out.append(f"  reproduce {first.id}: {reproduction(first, path, lines)}")
    return out


def summary(groups: list[Group], path: str) -> str:
    """What is left to decide, in one line."""
    if not groups:
        return f"review: nothing left to decide in {path}"
    count = sum(len(g.ids) for g in groups)
    failing = [g for g in groups if g.failure]
    text = (f"review: {count} entr{'y' if count == 1 else 'ies'} of {path} left to decide, "
            f"in {len(groups)} group{'s' if len(groups) != 1 else ''}: "
            + ", ".join(f"{g.key} ({len(g.ids)})" for g in groups))
    if failing:
        text += (f"; a failure if accepted: {sum(len(g.ids) for g in failing)} "
                 f"({', '.join(g.key for g in failing)})")
    return (text + ". Decide per group or entry: --accept KEY|ID takes what the device does, "
            "--keep KEY|ID keeps the reference (with --xfail-file PATH: its expected failure)")
