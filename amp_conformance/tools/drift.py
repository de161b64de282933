"""``python -m amp_conformance drift A.json B.json``: what changed between two conformance reports.

Two reports (``--conformance-report``, schema ``amp-conformance-report/2`` or ``/1``, see
``docs/report-schema.md``) are compared item by item, typically the same device on two torch
versions. Items are matched on the test module, the test function and the parametrization
id without its leading device type, so a report of another checkout or install path still
matches. Every difference is one of:

- ``availability`` — the item applies in one report and is reported not applicable in the
  other (a version bound, an amp dtype), or it exists in one report only;
- ``policy`` — a ``test_policy`` item observed other output dtypes (or an error) for a variant;
- ``outcome`` — the item ran in both and its outcome changed (passed, failed, skipped, …);
- ``message`` — same outcome, but another failure message or skip reason.

Messages are compared after replacing each report's own torch version by ``{torch}`` and
memory addresses by ``0x…``, so "running 2.13.0" against "running 2.14.1" is no drift.
Differences are grouped per op (op-list items) or per device-generic check, one line each.

Exit status: 0 when the reports agree, 1 when drift was found, 2 when a report cannot be
read, is not a well-formed conformance report, or records a run that did not complete
(``run.status`` other than ``"completed"``: its missing items are no drift; reports
written before ``run`` existed are read as before).
"""

from __future__ import annotations

import argparse
import json
import re
import reprlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_conformance.core.errors import first_line
from amp_conformance.plugin.report.journal import SCHEMA

#: the schemas drift reads: the current one and /1 (before reports named what they judged)
SCHEMAS = (SCHEMA, "amp-conformance-report/1")
#: the order kinds are listed in, and the precedence when an item changed in several ways
KINDS = ("availability", "policy", "outcome", "message")
NOT_APPLICABLE = "not applicable"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


class ReportError(ValueError):
    """A file that is no readable conformance report."""


@dataclass(frozen=True)
class Report:
    path: str
    meta: Mapping[str, Any]
    results: Mapping[tuple[str, str, str], Mapping[str, Any]]

    @property
    def torch(self) -> str:
        return str(self.meta.get("torch", "?"))

    def label(self) -> str:
        mode = "fake" if self.meta.get("fake") else "real"
        return f"{self.path} (torch {self.torch}, {self.meta.get('device', '?')} {mode})"


def _key(result: Mapping[str, Any], device: str) -> tuple[str, str, str]:
    nodeid = str(result.get("nodeid", ""))
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    test = str(result.get("test") or nodeid.split("::")[-1].split("[", 1)[0])
    param = result.get("param")
    if param is None:
        param = nodeid.split("[", 1)[1].rstrip("]") if "[" in nodeid else ""
    param = str(param)
    if device and param.startswith(f"{device}-"):
        param = param[len(device) + 1:]
    elif param == device:
        param = ""
    return module, test, param


#: the outcomes a result may have (docs/report-schema.md; "unfinished": the run stopped in it)
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error", "unfinished", "not run")
#: top-level keys drift reads, and their types (each optional: older reports lack some)
_META: dict[str, type | tuple[type, ...]] = {
    "torch": str, "device": str, "fake": bool, "amp_dtypes": list, "numerics": str}
#: result keys and their types; nodeid and outcome are required, the rest may be null
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "test": str, "check": str, "param": str, "amp_dtype": str, "category": str, "entry": str,
    "op": str, "message": str, "observed": dict}
_KIND_NAMES = {str: "a string", bool: "true or false", list: "a list", dict: "an object"}


def _check_run(path: str | Path, run: Any) -> None:
    """A report of a run that did not complete is no baseline: missing items would read
    as drift, or a crashed run as "no drift". Reports without ``run`` predate it."""
    if run is None:
        return
    if not isinstance(run, dict) or not isinstance(run.get("status"), str):
        raise ReportError(f"{path}: 'run' must be an object with a 'status' string")
    if run["status"] != "completed":
        how = [f"run.status {run['status']!r}"]
        if isinstance(run.get("interrupted_by"), str):
            how.append(f"interrupted by {run['interrupted_by']}")
        if isinstance(run.get("finished"), int) and isinstance(run.get("collected"), int):
            how.append(f"{run['finished']} of {run['collected']} items finished")
        raise ReportError(f"{path}: the run did not complete ({', '.join(how)}); its missing "
                          "items are no drift and its outcomes no verdict: compare reports of "
                          "completed runs only")


def _check_result(path: str | Path, index: int, result: Mapping[str, Any]) -> None:
    """Every key drift reads has the schema's type, so a malformed report is named here
    rather than failing mid-comparison (exit status 1 would read as "drift found")."""
    where = f"{path}: results[{index}]"
    for key in ("nodeid", "outcome"):
        if not isinstance(result.get(key), str):
            problem = "missing" if key not in result else f"{type(result[key]).__name__}, not a string"
            raise ReportError(f"{where}: key {key!r} {problem}")
    if result["outcome"] not in OUTCOMES:
        raise ReportError(f"{where}: outcome {result['outcome']!r} is none of {', '.join(OUTCOMES)}")
    for key, kind in _FIELDS.items():
        value = result.get(key)
        if value is not None and not isinstance(value, kind):
            raise ReportError(f"{where}: {key!r} must be {_KIND_NAMES[kind]} or null, got "
                              f"{type(value).__name__}")
    for variant, seen in (result.get("observed") or {}).items():
        if not (isinstance(seen, str) or isinstance(seen, list)
                and all(isinstance(d, str) for d in seen)):
            raise ReportError(f"{where}: observed[{variant!r}] must be a list of dtype names "
                              f"or an \"error: ...\" string, got {reprlib.repr(seen)}")


def load(path: str | Path) -> Report:
    """Read and check one report; raises ReportError naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{path}: not a JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") not in SCHEMAS:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise ReportError(f"{path}: not a conformance report (schema {found!r}, expected one of "
                          f"{', '.join(SCHEMAS)})")
    _check_run(path, data.get("run"))
    results = data.get("results")
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise ReportError(f"{path}: 'results' must be a list of objects")
    for key, kind in _META.items():
        if key in data and not isinstance(data[key], kind):
            raise ReportError(f"{path}: {key!r} must be {_KIND_NAMES[kind]}, got "
                              f"{type(data[key]).__name__}")
    device = str(data.get("device") or "")
    keyed: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for index, result in enumerate(results):
        _check_result(path, index, result)
        key = _key(result, device)
        if key in keyed:
            raise ReportError(f"{path}: two results for {result.get('nodeid')!r}")
        keyed[key] = result
    meta = {k: v for k, v in data.items() if k != "results"}
    return Report(str(path), meta, keyed)


# -- comparing -------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    kind: str
    group: str
    item: str
    explanation: str
    a: Mapping[str, Any] | None = None
    b: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "group": self.group, "item": self.item,
                "explanation": self.explanation, "a": self.a, "b": self.b}


@dataclass
class Drift:
    a: Report
    b: Report
    changes: list[Change] = field(default_factory=list)
    #: differences of the run settings (device, fake, amp dtypes, numerics), as notes
    notes: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        return not self.changes

    def groups(self) -> dict[str, list[Change]]:
        grouped: dict[str, list[Change]] = {}
        for change in sorted(self.changes, key=_sort_key):
            grouped.setdefault(change.group, []).append(change)
        return grouped


def _sort_key(change: Change) -> tuple:
    generic = change.group.startswith("[")
    return (generic, change.group, KINDS.index(change.kind), change.item)


def _normalize(message: Any, torch_version: str) -> str | None:
    if message is None:
        return None
    text = str(message)
    if torch_version:
        text = text.replace(torch_version, "{torch}")
    return _ADDRESS.sub("0x…", text)


def _not_applicable(result: Mapping[str, Any]) -> bool:
    return result.get("outcome") == "skipped" and str(result.get("message") or "").startswith(
        NOT_APPLICABLE)


def _reason(result: Mapping[str, Any], torch_version: str = "") -> str:
    """A not-applicable item's reason without its "not applicable: " prefix."""
    text = first_line(_normalize(result.get("message"), torch_version), 160)
    return text.removeprefix(NOT_APPLICABLE).lstrip(":").strip()


def _group(result: Mapping[str, Any]) -> str:
    if result.get("op"):
        return str(result["op"])
    return f"[{result.get('check') or result.get('test') or 'other'}]"


def _item(key: tuple[str, str, str]) -> str:
    module, test, param = key
    if test.startswith("test_policy") or module == "test_oplist.py":
        return f"{test}[{param}]" if param else test
    return f"{module}::{test}[{param}]" if param else f"{module}::{test}"


def _dtypes(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return "(" + ", ".join(map(str, value)) + ")" if len(value) != 1 else str(value[0])
    return str(value)


def _policy_change(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    a, b = a or {}, b or {}
    parts = []
    for variant in sorted(set(a) | set(b)):
        if a.get(variant) != b.get(variant):
            parts.append(f"{variant} {_dtypes(a.get(variant))} -> {_dtypes(b.get(variant))}")
    return parts


def _describe(result: Mapping[str, Any]) -> str:
    outcome = str(result.get("outcome"))
    message = first_line(result.get("message"), 160)
    return f"{outcome} ({message})" if message else outcome


def compare_item(
    key: tuple[str, str, str], ra: Mapping[str, Any] | None, rb: Mapping[str, Any] | None,
    a: Report, b: Report,
) -> Change | None:
    """The change of one item between the reports, or None when it did not change."""
    group = _group(rb if ra is None else ra)
    item = _item(key)
    if ra is None or rb is None:
        present, side, other = (rb, "B", "A") if ra is None else (ra, "A", "B")
        return Change("availability", group, item,
                      f"only in {side} ({_describe(present)}); {other} does not generate it", ra, rb)
    na_a, na_b = _not_applicable(ra), _not_applicable(rb)
    if na_a != na_b:
        if na_a:
            text = f"not applicable in A ({_reason(ra)}); {_describe(rb)} in B"
        else:
            text = f"{_describe(ra)} in A; not applicable in B ({_reason(rb)})"
        return Change("availability", group, item, text, ra, rb)
    outcome_a, outcome_b = ra.get("outcome"), rb.get("outcome")
    outcome = f"{outcome_a} -> {outcome_b}" if outcome_a != outcome_b else ""
    policy = _policy_change(ra.get("observed"), rb.get("observed"))
    if policy:
        text = "; ".join(policy) + (f" ({outcome})" if outcome else "")
        return Change("policy", group, item, text, ra, rb)
    if outcome:
        message = first_line(rb.get("message") if outcome_b != "passed" else ra.get("message"), 160)
        return Change("outcome", group, item, outcome + (f": {message}" if message else ""), ra, rb)
    message_a = _normalize(ra.get("message"), a.torch)
    message_b = _normalize(rb.get("message"), b.torch)
    if message_a != message_b and na_a:
        return Change("message", group, item,
                      f"not applicable in both, for another reason: {_reason(ra, a.torch)!r} -> "
                      f"{_reason(rb, b.torch)!r}", ra, rb)
    if message_a != message_b:
        return Change("message", group, item,
                      f"{outcome_b}: {first_line(message_a, 160) or '—'!r} -> "
                      f"{first_line(message_b, 160) or '—'!r}",
                      ra, rb)
    return None


_SETTINGS = ("device", "fake", "amp_dtypes", "numerics")


def compare(a: Report, b: Report) -> Drift:
    drift = Drift(a, b)
    for name in _SETTINGS:
        if a.meta.get(name) != b.meta.get(name):
            drift.notes.append(f"{name} differs: {a.meta.get(name)!r} in A, {b.meta.get(name)!r} in B")
    for key in sorted(set(a.results) | set(b.results)):
        change = compare_item(key, a.results.get(key), b.results.get(key), a, b)
        if change is not None:
            drift.changes.append(change)
    return drift


# -- output ----------------------------------------------------------------------------


def _counts(changes: Iterable[Change]) -> str:
    counts: dict[str, int] = {}
    for change in changes:
        counts[change.kind] = counts.get(change.kind, 0) + 1
    return ", ".join(f"{counts[k]} {k}" for k in KINDS if k in counts)


@dataclass(frozen=True)
class Line:
    """Changes of one group with the same kind and explanation, e.g. every check of an entry."""

    kind: str
    explanation: str
    changes: tuple[Change, ...]

    @property
    def items(self) -> str:
        """The items, named compactly: ``4 items (test_numerics, test_policy × bfloat16, float16
        × entry mm)`` when they are every combination of their tests, dtypes and entries."""
        if len(self.changes) == 1:
            return self.changes[0].item
        tests, dtypes, entries = set(), set(), set()
        for change in self.changes:
            result = change.b if change.b is not None else change.a
            tests.add(str(result.get("test")))
            dtypes.add(str(result.get("amp_dtype")))
            entries.add(str(result.get("entry")))
        if "None" in entries or len(tests) * len(dtypes) * len(entries) != len(self.changes):
            return ", ".join(c.item for c in self.changes)
        parts = [", ".join(sorted(tests))]
        if dtypes != {"None"}:
            parts.append(", ".join(sorted(dtypes)))
        parts.append("entry " + ", ".join(sorted(entries)))
        return f"{len(self.changes)} items ({' × '.join(parts)})"


def lines(changes: Iterable[Change]) -> list[Line]:
    """Changes collapsed by (kind, explanation), in the order they come."""
    buckets: dict[tuple[str, str], list[Change]] = {}
    for change in changes:
        buckets.setdefault((change.kind, change.explanation), []).append(change)
    return [Line(kind, text, tuple(cs)) for (kind, text), cs in buckets.items()]


def format_text(drift: Drift, verbose: bool = False) -> str:
    lines_out = [f"A: {drift.a.label()}", f"B: {drift.b.label()}"]
    lines_out += [f"note: {note}" for note in drift.notes]
    if drift.identical:
        lines_out.append(f"no drift: the {len(drift.a.results)} items agree "
                         "(policy, availability, outcomes and messages)")
        return "\n".join(lines_out)
    groups = drift.groups()
    lines_out.append(f"drift: {len(groups)} ops/checks, {len(drift.changes)} items "
                     f"({_counts(drift.changes)})")
    width = max(len(k) for k in KINDS)
    for group, changes in groups.items():
        lines_out.append("")
        lines_out.append(f"{group}")
        if verbose:
            for change in changes:
                lines_out.append(f"  {change.kind:<{width}}  {change.item}: {change.explanation}")
            continue
        for line in lines(changes):
            lines_out.append(f"  {line.kind:<{width}}  {line.items}: {line.explanation}")
    return "\n".join(lines_out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_markdown(drift: Drift, verbose: bool = False) -> str:
    a, b = drift.a, drift.b
    title = (f"### Drift: torch {a.torch} → torch {b.torch} "
             f"({a.meta.get('device', '?')}{' fake' if a.meta.get('fake') else ''})")
    out = [title, ""]
    out += [f"> note: {_md(note)}" for note in drift.notes]
    if drift.identical:
        out.append(f"No drift: the {len(a.results)} items agree.")
        return "\n".join(out) + "\n"
    out += [f"{len(drift.changes)} items drifted ({_counts(drift.changes)}).", "",
            "| op / check | kind | items | change |", "| --- | --- | --- | --- |"]
    for group, changes in drift.groups().items():
        rows = ([Line(c.kind, c.explanation, (c,)) for c in changes] if verbose
                else lines(changes))
        for line in rows:
            out.append(f"| `{_md(group)}` | {line.kind} | {_md(line.items)} | "
                       f"{_md(line.explanation)} |")
    return "\n".join(out) + "\n"


def format_json(drift: Drift, verbose: bool = False) -> str:
    return json.dumps({
        "a": {"path": drift.a.path, "torch": drift.a.torch},
        "b": {"path": drift.b.path, "torch": drift.b.torch},
        "identical": drift.identical,
        "notes": drift.notes,
        "groups": [{"group": g, "changes": [c.to_json() for c in cs]}
                   for g, cs in drift.groups().items()],
    }, indent=2)


FORMATS = {"text": format_text, "markdown": format_markdown, "json": format_json}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report_a", metavar="REPORT_A.json", help="the reference report")
    parser.add_argument("report_b", metavar="REPORT_B.json", help="the report compared with it")
    parser.add_argument("--format", choices=sorted(FORMATS), default="text",
                        help="text (default), markdown (for a CI step summary) or json")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="one line per item, instead of one per op and distinct change")
    parser.epilog = ("exit status: 0 no drift, 1 drift found, 2 unreadable or malformed report, "
                     "or a run that did not complete")


def run(args: argparse.Namespace) -> int:
    """Print the drift between two reports; 0 when none, 1 when drift was found, 2 on bad input."""
    try:
        a, b = load(args.report_a), load(args.report_b)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    drift = compare(a, b)
    print(FORMATS[args.format](drift, verbose=args.verbose),
          end="" if args.format == "markdown" else "\n")
    return 0 if drift.identical else 1
