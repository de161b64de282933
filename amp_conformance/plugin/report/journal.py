"""The report's journal: every event of a run appended durably, and the report rebuilt from it.

A run that crashes (a segfault, ``os._exit``, a hang that had to be killed) never reaches
``pytest_sessionfinish``, so a report written only at the end would be lost, or worse, an
earlier run's report would stay in place. The session appends one JSON line per event to
``PATH.journal.jsonl`` (flushed at once: what was written survives the process's death), and the
report is a pure function of those events: the plugin builds it at the end of a run, and
``python -m amp_conformance run`` rebuilds it after a run that died, with the run marked
crashed and the item that was running named. No pytest here.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amp_conformance.checks import registry
from amp_conformance.plugin.report import banner, causes
from amp_conformance.plugin.report.banner import blamed_op

SCHEMA = "amp-conformance-report/2"
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")
#: an item that started but whose teardown never reported: the run stopped inside it
UNFINISHED = "unfinished"
#: a selected item no process started (a lost device, a run that gave up restarting), or
#: one stopped before it reached a quarantined op (plugin/quarantine.py)
NOT_RUN = "not run"
#: pytest's category of an item that called a quarantined op
QUARANTINED = "quarantined"
NOT_APPLICABLE = "not applicable"
#: an item's outcome when its phases differ: the most telling one wins
_RANK = {"": 0, "passed": 1, "skipped": 2, "xfailed": 3, "xpassed": 4, "error": 5, "failed": 6,
         NOT_RUN: 7}
_MAX_MESSAGE = 4000
#: run statuses: only "completed" is a verdict
STATUSES = ("running", "completed", "interrupted", "crashed", "device lost")
#: the family of results whose item names no check (a collection error)
OTHER = "other"


def journal_path(report: str | Path) -> Path:
    """``reports/cpu.json`` -> ``reports/cpu.journal.jsonl``."""
    report = Path(report)
    return report.with_name(report.stem + ".journal.jsonl")


class Journal:
    """Append-only, one JSON object per line, each line handed to the OS before the next
    event (a dying process loses none; the file is fsynced when the run ends)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("w", encoding="utf-8")

    def append(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps(event, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """The journal's events; a last line cut short by a crash is dropped."""
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events


def is_not_applicable(message: str | None) -> bool:
    return bool(message) and message.startswith(NOT_APPLICABLE)


def split_nodeid(nodeid: str) -> tuple[str | None, str | None]:
    """(test function name, parametrization id) of a node id."""
    if "::" not in nodeid:
        return None, None
    name = nodeid.rsplit("::", 1)[1]
    if "[" in name and name.endswith("]"):
        test, param = name.split("[", 1)
        return test, param[:-1]
    return name, None


@dataclass
class ItemRecord:
    nodeid: str
    outcome: str = ""
    message: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    observed: Any = None
    #: the reference-defect verdict: {id, status (reproduced/fixed), links, summary}
    defect: dict[str, Any] | None = None
    #: an OpInfo-tier item's summary (plugin.report.surface)
    opinfo: dict[str, Any] | None = None
    #: the excuse it was granted: {mechanism, evidence} (plugin.excuses)
    excuse: dict[str, Any] | None = None
    finished: bool = False
    #: the item's own time: its setup, call and teardown reports' durations
    seconds: float = 0.0

    def add(self, event: dict[str, Any]) -> None:
        if event.get("item"):
            self.info = dict(event["item"])
        if event.get("observed") is not None:
            self.observed = event["observed"]
        if event.get("defect") is not None:
            self.defect = event["defect"]
        if event.get("opinfo") is not None:
            self.opinfo = event["opinfo"]
        if event.get("excuse") is not None:
            self.excuse = event["excuse"]
        self.seconds += event.get("duration") or 0.0
        category = event.get("category", "")
        if category == QUARANTINED:  # stopped before the op that loses the device: no verdict
            category = NOT_RUN
        if _RANK.get(category, 0) > _RANK.get(self.outcome, 0):
            self.outcome = category
            self.message = event.get("message")

    @property
    def final_outcome(self) -> str:
        """The item's outcome; never "passed" for an item the run did not finish."""
        if not self.finished and self.outcome in ("", "passed"):
            return UNFINISHED
        return self.outcome or "passed"

    def as_json(self) -> dict[str, Any]:
        test, param = split_nodeid(self.nodeid)
        message = self.message
        if message is not None and len(message) > _MAX_MESSAGE:
            message = message[:_MAX_MESSAGE] + "\n… (truncated)"
        info = self.info
        return {
            "nodeid": info.get("nodeid") or self.nodeid,
            "test": test,
            "check": info.get("check"),
            "param": param,
            "amp_dtype": info.get("amp_dtype"),
            "category": info.get("category"),
            "entry": info.get("entry"),
            "op": info.get("op"),
            "outcome": self.final_outcome,
            "seconds": round(self.seconds, 4),
            "message": message,
            "observed": self.observed if self.observed not in ({}, None) else None,
            "defect": self.defect,
            **({"wrapper": info["wrapper"]} if info.get("wrapper") else {}),
            **({"opinfo": self.opinfo} if self.opinfo else {}),
            **({"excuse": self.excuse} if self.excuse else {}),
        }


class Accumulator:
    """Items and counts from a stream of events (live in the plugin, replayed after a crash)."""

    def __init__(self) -> None:
        self.session: dict[str, Any] = {}
        #: when the session started and the last event seen (epoch seconds; None in journals
        #: older than the timings)
        self.began: float | None = None
        self.last: float | None = None
        self.records: dict[str, ItemRecord] = {}
        self.counts: Counter[str] = Counter()
        self.running: str | None = None
        self.collected: int | None = None
        #: the selection, [pytest node id, check or None] each, where the session named it
        self.selection: list[list[Any]] = []
        self.deselected = 0
        self.end: dict[str, Any] | None = None
        #: items that started (never collection errors): the rest of the selection did not run
        self.started: set[str] = set()
        #: the device losses reported (plugin/health.py): {nodeid, worker, reason}
        self.lost: list[dict[str, Any]] = []
        #: a merged run: the processes that stopped and how (:func:`merge`), and how many ran
        self.restarts: list[dict[str, Any]] = []
        self.processes = 1

    def feed(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if event.get("time") is not None:
            self.last = event["time"]
        if kind == "session":
            self.session = {k: v for k, v in event.items() if k not in ("event", "time")}
            self.began = event.get("time")
        elif kind == "collected":
            self.collected = event.get("count")
            self.selection = event.get("items") or []
        elif kind == "deselected":
            self.deselected += event.get("count", 0)
        elif kind == "start":
            self.running = event["nodeid"]
            self.started.add(event["nodeid"])
            self.records.setdefault(event["nodeid"], ItemRecord(event["nodeid"]))
        elif kind == "report":
            self._report(event)
        elif kind == "finish":
            self.records.setdefault(event["nodeid"], ItemRecord(event["nodeid"])).finished = True
            if self.running == event["nodeid"]:
                self.running = None
        elif kind == "end":
            self.end = event

    def _report(self, event: dict[str, Any]) -> None:
        category = event.get("category", "")
        if category == QUARANTINED:
            self.counts[QUARANTINED] += 1
        if category in OUTCOMES:
            self.counts[category] += 1
            if category == "skipped" and is_not_applicable(event.get("message")):
                self.counts["not_applicable"] += 1
        record = self.records.setdefault(event["nodeid"], ItemRecord(event["nodeid"]))
        record.add(event)
        if event.get("device_lost"):
            self.lost.append({"nodeid": (event.get("item") or {}).get("nodeid") or event["nodeid"],
                              **event["device_lost"]})
        if event.get("collection"):  # a collection error or skip: nothing more will come
            record.finished = True


def quarantined(acc: Accumulator) -> dict[str, list[str]]:
    """The items not run for a quarantined op, by op (``aten::baddbmm``), in node-id order."""
    table: dict[str, list[str]] = {}
    for nodeid, record in sorted(acc.records.items()):
        if record.outcome == NOT_RUN and (record.message or "").startswith("not run: aten::"):
            head = record.message.split(" loses")[0].split(" lose ")[0]
            for op in re.findall(r"aten::[\w.]+", head):
                table.setdefault(op, []).append(record.info.get("nodeid") or nodeid)
    return table


def run_status(acc: Accumulator, process_gone: bool) -> dict[str, Any]:
    """The ``run`` object: whether the run completed, and if not, how it stopped."""
    unfinished = sorted(n for n, r in acc.records.items() if r.final_outcome == UNFINISHED)
    finished = [r for r in acc.records.values() if r.finished and r.outcome != NOT_RUN]
    executed = sum(1 for r in finished if r.final_outcome not in ("skipped",))
    if acc.end is not None:
        interrupted = acc.end.get("interrupted_by")
        status = "device lost" if acc.lost else "interrupted" if interrupted else "completed"
    else:
        status = "crashed" if process_gone else "running"
        interrupted = None
    first = acc.lost[0] if acc.lost else {}
    return {
        "status": status,
        "exitstatus": acc.end.get("exitstatus") if acc.end else None,
        "interrupted_by": interrupted,
        "running": acc.running if status != "completed" else None,
        "collected": acc.collected,
        "deselected": acc.deselected,
        "finished": len(finished),
        "executed": executed,
        "unfinished": unfinished[:50],
        "not_run": max(0, (acc.collected or 0) - len(acc.started)),
        "not_run_families": dict(sorted(Counter(
            r.info.get("check") or split_nodeid(n)[0] or OTHER for n, r in acc.records.items()
            if r.outcome == NOT_RUN).items())),
        "lost_after": first.get("nodeid"),
        "lost_on": first.get("worker"),
        "lost": acc.lost,
        "restarts": acc.restarts,
        "processes": acc.processes,
        "quarantined": quarantined(acc),
        "setup_errors": (acc.end or {}).get("setup_errors") or [],
        "wall": wall(acc),
    }


def wall(acc: Accumulator) -> float | None:
    """Seconds from the session's start to its end (or, for a run that did not end, to its
    last timed event): under xdist less than the items' own time summed."""
    end = (acc.end or {}).get("time") or acc.last
    return round(end - acc.began, 3) if acc.began is not None and end is not None else None


def _guess(records: dict[str, ItemRecord], nodeid: str) -> dict[str, Any]:
    """The check and package id of an item known only by its node id (an xdist controller
    hears ids alone), read from a run item of the same test function or file."""
    test, file = nodeid.split("[", 1)[0], nodeid.split("::", 1)[0]
    check, prefix = None, None
    for known, record in records.items():
        if record.outcome == NOT_RUN or not record.info.get("nodeid"):
            continue
        if check is None and known.split("[", 1)[0] == test:
            check = record.info.get("check")
        if prefix is None and known.split("::", 1)[0] == file:
            prefix = record.info["nodeid"].split("::", 1)[0]
    rest = nodeid.split("::", 1)[1] if "::" in nodeid else None
    return {"check": check, "nodeid": f"{prefix}::{rest}" if prefix and rest else nodeid}


def add_not_run(acc: Accumulator) -> None:
    """List the selected items no process started as results (outcome :data:`NOT_RUN`),
    so a stopped run names what it did not check, family by family."""
    for nodeid, check in acc.selection:
        if nodeid not in acc.started and nodeid not in acc.records:
            info = _guess(acc.records, nodeid)
            acc.records[nodeid] = ItemRecord(nodeid, NOT_RUN, finished=True,
                                             info={**info, "check": check or info["check"]})


def build_report(acc: Accumulator, process_gone: bool = False) -> dict[str, Any]:
    """The report (docs/report-schema.md) from what the events said."""
    if acc.lost or acc.restarts:
        add_not_run(acc)
    results = sorted((r.as_json() for r in acc.records.values()), key=lambda r: r["nodeid"])
    summary = {k: acc.counts.get(k, 0) for k in (*OUTCOMES, "not_applicable", QUARANTINED)}
    summary[UNFINISHED] = sum(1 for r in results if r["outcome"] == UNFINISHED)
    return {
        "schema": SCHEMA,
        **acc.session,
        "run": run_status(acc, process_gone),
        "summary": summary,
        "categories": categories(results),
        "families": families(results),
        "tiers": tiers(results),
        "reference_defects": reference_defects(results),
        **{k: v for tier in registry.tiers() for k, v in tier.summary(results).items()},
        "causes": causes.of_results(results),
        "excused": banner.excused(results),
        "results": results,
    }


def replay(journal: Path) -> Accumulator:
    """The accumulator of a journal's events."""
    acc = Accumulator()
    for event in read_events(journal):
        acc.feed(event)
    return acc


def rebuild(journal: Path) -> dict[str, Any]:
    """The report of a run whose process is gone, from its journal alone."""
    return build_report(replay(journal), process_gone=True)


def _stopped(acc: Accumulator, how: str) -> list[dict[str, Any]]:
    """How one process of a restarted run stopped: each device it lost (several where
    several of its xdist workers lost theirs), or the item it died in, which counts as
    failed."""
    if acc.lost:
        return [{"kind": "device lost", "after": loss["nodeid"], "on": loss.get("worker"),
                 "how": loss.get("reason"), "op": blamed_op(loss.get("reason"))}
                for loss in acc.lost]
    record = acc.records.get(acc.running or "")
    if record is None:
        return [{"kind": "crashed", "after": None, "on": None, "how": how, "op": None}]
    record.outcome, record.finished = "failed", True
    record.message = (f"the process died during this item ({how}); no later item ran in that "
                      "process")
    acc.counts["failed"] += 1
    return [{"kind": "crashed", "after": record.info.get("nodeid") or record.nodeid,
             "on": None, "how": how, "op": None}]


def merge(parts: list[tuple[Accumulator, str]], settled: bool = False) -> dict[str, Any]:
    """One report of a run restarted in fresh processes (``python -m amp_conformance run``):
    ``parts`` are each process's accumulator and how it ended, in order; each later one ran
    only the items no earlier one had started. The first names the run and its selection,
    the last how it ended; the items the stopped ones died in count as failed, once.
    ``settled``: the last one too stopped in its last item, so no item is left to run."""
    merged = Accumulator()
    first, last = parts[0][0], parts[-1][0]
    merged.session, merged.collected, merged.deselected, merged.selection = (
        first.session, first.collected, first.deselected, first.selection)
    merged.processes = len(parts)
    merged.began, merged.last = first.began, last.last
    for acc, how in parts if settled else parts[:-1]:
        merged.restarts += _stopped(acc, how)
    for acc, _ in parts:
        for nodeid, record in acc.records.items():
            merged.records.setdefault(nodeid, record)
        merged.started |= acc.started
        merged.counts.update(acc.counts)
    if settled:
        merged.end = last.end or {"event": "end", "exitstatus": None, "interrupted_by": None}
    else:
        merged.end, merged.lost, merged.running = last.end, last.lost, last.running
    return build_report(merged, process_gone=merged.end is None)


def _tally(results: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """Per value of ``key``: item outcomes, not-applicable skips and the pass rate."""
    table: dict[str, Counter[str]] = {}
    seconds: Counter[str] = Counter()
    for r in results:
        name = r[key] if key == "category" else (r[key] or OTHER)
        if name is None:
            continue
        counts = table.setdefault(name, Counter())
        counts[r["outcome"]] += 1
        seconds[name] += r.get("seconds") or 0.0
        if r["outcome"] == "skipped" and is_not_applicable(r["message"]):
            counts["not_applicable"] += 1
    out: dict[str, dict[str, Any]] = {}
    for name, counts in table.items():
        row: dict[str, Any] = {k: counts.get(k, 0) for k in (*OUTCOMES, "not_applicable")}
        row["not_run"] = counts.get(NOT_RUN, 0)
        ran = row["passed"] + row["failed"] + row["error"] + row["xpassed"]
        row["pass_rate"] = round(row["passed"] / ran, 4) if ran else None
        row["items"] = sum(counts.values()) - counts["not_applicable"]
        row["seconds"] = round(seconds[name], 3)
        out[name] = row
    return out


def categories(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per op-list category: item outcomes, not-applicable skips and the pass rate."""
    table = _tally(results, "category")
    return {name: table[name] for name in sorted(table)}


def families(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per check family (the item's ``check``, in the registry's order; ``other`` for
    results of no check): the same counts as a category, and whether the family's items
    are op-list entries (``per_entry``), so failures outside the op lists show apart."""
    table = _tally(results, "check")
    order = {name: i for i, name in enumerate(registry.names())}
    out = {}
    for name in sorted(table, key=lambda n: (order.get(n, len(order)), n)):
        per_entry = name in registry.REGISTRY and registry.REGISTRY[name].per_entry
        out[name] = {**table[name], "per_entry": per_entry}
    return out


#: the tier of the items no opt-in tier generates
DEFAULT_TIER = "default"


def tiers(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Items and their own time per tier: ``default`` and each opt-in tier that had items
    (by its check's name, with the option that asks for it)."""
    by_check = {t.check: t for t in registry.tiers()}
    out: dict[str, dict[str, Any]] = {DEFAULT_TIER: {"option": None, "items": 0, "seconds": 0.0}}
    for r in results:
        tier = by_check.get(r.get("check") or "")
        name = tier.check if tier is not None else DEFAULT_TIER
        row = out.setdefault(name, {"option": next(iter(tier.options), None) if tier else None,
                                    "items": 0, "seconds": 0.0})
        row["items"] += 1
        row["seconds"] += r.get("seconds") or 0.0
    for row in out.values():
        row["seconds"] = round(row["seconds"], 3)
    return out


def reference_defects(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PyTorch's own defects this run met: per defect, the items where the device
    reproduced it and those where it did what the contract intends (fixed)."""
    table: dict[str, dict[str, Any]] = {}
    for r in results:
        d = r.get("defect")
        if not d or r["outcome"] not in ("passed", "xpassed"):
            continue
        row = table.setdefault(d["id"], {"id": d["id"], "links": d.get("links", []),
                                         "summary": d.get("summary", ""),
                                         "reproduced": [], "fixed": []})
        row[d["status"]].append(r["nodeid"])
    return [table[k] for k in sorted(table)]
