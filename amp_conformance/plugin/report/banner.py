"""What a report says in words before any table: whether it is a verdict at all (a run
that stopped, lost its device, or executed nothing), what was restarted, what part of the
suite it covers, and a score line that never reads as a bare pass rate when items were not
run or failures lie outside the op lists. Shared by the HTML and Markdown renderings and by
``python -m amp_conformance run``; pure functions of the report's data."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from amp_conformance.schema.defects import is_recorded

#: outcomes that count against the device (failed, error, strict xpass, never finished)
PROBLEMS = ("failed", "error", "xpassed", "unfinished")


def _where(nodeid: str | None, worker: str | None) -> str:
    return f"{nodeid}{f' on {worker}' if worker else ''}"


def not_run_note(run: dict[str, Any]) -> str:
    """``"762 items not run (policy 500, outside 262)"``: the count, and by family where known."""
    families = run.get("not_run_families") or {}
    detail = ", ".join(f"{name} {n}" for name, n in
                       sorted(families.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{run.get('not_run', 0)} items not run" + (f" ({detail})" if detail else "")


#: the mechanisms that excuse an item (plugin/excuses.py), singular -> plural, in order
EXCUSES = {"limit": "limits", "missing kernel": "missing kernels",
           "transform limit": "transform limits"}


def excused(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``excused``: the items an excuse spared (a skip, or entries of a passing
    transform item), counted per mechanism, each with its evidence."""
    items = [{"nodeid": r.get("nodeid"), "outcome": r.get("outcome"), **r["excuse"]}
             for r in sorted(results, key=lambda r: r.get("nodeid") or "") if r.get("excuse")]
    counts: dict[str, int] = {}
    for item in items:
        counts[item["mechanism"]] = counts.get(item["mechanism"], 0) + 1
    return {"count": len(items), "by_mechanism": counts, "items": items}


def excused_line(data: dict[str, Any]) -> str | None:
    """``"12 items excused: limits 6, missing kernels 6"``, or None."""
    found = data.get("excused")
    if found is None:
        found = excused(data.get("results") or [])
    if not found["count"]:
        return None
    parts = [f"{EXCUSES.get(m, m)} {n}" for m, n in sorted(found["by_mechanism"].items(),
                                                             key=lambda kv: (-kv[1], kv[0]))]
    return (f"{found['count']} item{'s' if found['count'] != 1 else ''} excused: "
            + ", ".join(parts))


def run_warning(data: dict[str, Any]) -> str | None:
    """What makes this report no verdict, in one sentence: a device lost during the run, a
    run that did not complete (interrupted, crashed, still running) or in which no check
    executed; None otherwise."""
    run = data.get("run") or {}
    status = run.get("status", "completed")
    if status == "device lost":
        rest = ("" if run.get("gave_up") else " (python -m amp_conformance run runs the rest in "
                "a fresh process)")
        return (f"DEVICE LOST after {_where(run.get('lost_after'), run.get('lost_on'))}: "
                f"{not_run_note(run)}. The device was unusable after that item, so this report "
                f"is no verdict{rest}.")
    if status != "completed":
        how = {"running": "did not finish (the report was never completed: the process died, "
                          "or is still running)",
               "crashed": "crashed",
               "interrupted": f"was interrupted ({run.get('interrupted_by')})"}.get(status, status)
        where = f"; it stopped in {run['running']}" if run.get("running") else ""
        return f"INCOMPLETE RUN: the run {how}{where}. This report is not a verdict."
    if run.get("setup_errors"):
        return ("SETUP ERROR: " + "; ".join(run["setup_errors"]) + ". That tier checked "
                "nothing: this report is no verdict on it.")
    if run.get("executed") == 0:
        return ("NO CHECK EXECUTED: every item was skipped or deselected. This report proves "
                "nothing about the device.")
    return None


def verdict(data: dict[str, Any]) -> tuple[bool, str]:
    """(conforms, the sentence a report opens with): no verdict where :func:`run_warning`
    says so, a partial one where items were not run, else whether every executed check
    passed."""
    s, run, device = data.get("summary") or {}, data.get("run") or {}, data.get("device")
    warning = run_warning(data)
    if warning:
        return False, f"NO VERDICT on {device}: {warning.split(': ', 1)[0]}."
    problems = sum(s.get(k, 0) for k in ("failed", "error", "xpassed"))
    excused = excused_line(data)
    excused = f" {excused[0].upper()}{excused[1:]}." if excused else ""
    if problems:
        return False, (f"DOES NOT CONFORM: {problems} of the executed checks on {device} "
                       f"failed ({s.get('passed', 0)} passed).{excused}")
    if run.get("not_run"):
        return False, (f"PARTIAL VERDICT: every executed check on {device} passed, but "
                       f"{not_run_note(run)}.")
    recorded = sum(1 for r in data.get("results") or () if r.get("outcome") == "xfailed"
                   and is_recorded(r.get("message")))
    declared = s.get("xfailed", 0) - recorded
    expected = "".join((
        f", {declared} expected failures declared for the device" if declared else "",
        f", {recorded} expected failures that are PyTorch's own recorded defects"
        if recorded else ""))
    return True, (f"CONFORMS: every executed check on {device} passed ({s.get('passed', 0)} "
                  f"passed{expected}, {s.get('skipped', 0)} skipped).{excused}")


def _stops(restarts: list[dict[str, Any]]) -> list[str]:
    """One phrase per op the health probe blamed (its items counted), per other lost
    device, per crash: a backend with 40 faulty ops reads as 40 ops."""
    by_op: dict[str, list[dict[str, Any]]] = {}
    phrases: list[str] = []
    for r in restarts:
        if r.get("kind") == "device lost" and r.get("op"):
            if r["op"] not in by_op:
                phrases.append(r["op"])  # its place, filled in below
            by_op.setdefault(r["op"], []).append(r)
        elif r.get("kind") == "device lost":
            phrases.append(f"DEVICE LOST after {_where(r.get('after'), r.get('on'))}")
        else:
            phrases.append(f"CRASHED in {_where(r.get('after'), r.get('on'))} ({r.get('how')})")
    for i, phrase in enumerate(phrases):
        items = by_op.get(phrase)
        if items:
            phrases[i] = (f"DEVICE LOST in {phrase} after {_where(items[0].get('after'), items[0].get('on'))}"
                          if len(items) == 1 else f"DEVICE LOST in {phrase} ({len(items)} items)")
    return phrases


def restart_note(data: dict[str, Any]) -> str | None:
    """How a supervised run went on after a process lost its device or died, or None."""
    run = data.get("run") or {}
    restarts = run.get("restarts") or []
    if not restarts:
        return None
    phrases = _stops(restarts)
    ops = sum(1 for p in phrases if p.startswith("DEVICE LOST in "))
    head = f"{ops} ops lost the device: " if ops > 3 else ""
    which = "that item" if len(restarts) == 1 else "each of those items"
    held = " (or, calling a quarantined op, was not run)" if run.get("quarantined") else ""
    processes = run.get("processes", len(restarts) + 1)
    return (f"{head}{'; '.join(phrases)}: {which} failed, once, and every other item ran in a "
            f"sound process{held} ({processes} process{'' if processes == 1 else 'es'}).")


def blamed_op(reason: str | None) -> str | None:
    """The op a lost device's reason names (``… in aten::baddbmm``), or None."""
    found = re.search(r"\b(aten::[A-Za-z0-9_.]+)", reason or "")
    return found.group(1).rstrip(".") if found else None


def lost_by_op(data: dict[str, Any]) -> dict[str, list[str]]:
    """The items each blamed op lost the device in, in the run's order: the restarted
    processes', then the last one's (a run that gave up restarting)."""
    run = data.get("run") or {}
    pairs = [(r.get("op"), r.get("after")) for r in run.get("restarts") or []
             if r.get("kind") == "device lost"]
    pairs += [(blamed_op(x.get("reason")), x.get("nodeid")) for x in run.get("lost") or []]
    table: dict[str, list[str]] = {}
    for op, nodeid in pairs:
        if nodeid not in table.get(op or "(no op named)", []):
            table.setdefault(op or "(no op named)", []).append(nodeid)
    return table


def quarantine_note(data: dict[str, Any]) -> str | None:
    """``"PARTIAL VERDICT: 37 items not run, quarantined: aten::mm loses the device (30
    items), aten::baddbmm (7 items)"``, or None: the items stopped before an op that lost
    the device earlier in the run (plugin/quarantine.py) have no verdict."""
    table = (data.get("run") or {}).get("quarantined") or {}
    if not table:
        return None
    items = len({n for nodes in table.values() for n in nodes})
    ops = [f"{op} loses the device ({len(nodes)} items)" if i == 0 else f"{op} ({len(nodes)} items)"
           for i, (op, nodes) in enumerate(sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0])))]
    return f"PARTIAL VERDICT: {items} items not run, quarantined: {', '.join(ops)}"


def partial_note(data: dict[str, Any]) -> str | None:
    """Why this report covers only part of the suite (a selection), or None."""
    run, options = data.get("run") or {}, data.get("options") or {}
    why = []
    if options.get("keyword"):
        why.append(f"-k {options['keyword']!r}")
    if options.get("markexpr"):
        why.append(f"-m {options['markexpr']!r}")
    if run.get("deselected"):
        why.append(f"{run['deselected']} items deselected")
    if options.get("amp_dtypes_requested"):
        why.append(f"--amp-dtype {', '.join(options['amp_dtypes_requested'])}")
    return ("PARTIAL RUN: " + "; ".join(why) + ". Only the selected checks are reported.") if why else None


def pass_rate(counts: dict[str, Any]) -> float | None:
    ran = sum(counts.get(k, 0) for k in ("passed", "failed", "error", "xpassed"))
    return counts.get("passed", 0) / ran if ran else None


def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{100 * rate:.1f}%"


def outside_problems(data: dict[str, Any]) -> tuple[int, str]:
    """(count, "73 in compile_regions, 2 in threads") of the problems of items outside the
    op lists (device-generic check families), which the category table does not show."""
    found = Counter(r.get("check") or "other" for r in data.get("results") or []
                    if r.get("category") is None and r.get("outcome") in PROBLEMS)
    return sum(found.values()), ", ".join(f"{n} in {name}" for name, n in found.most_common())


def rate_note(data: dict[str, Any]) -> str:
    """The pass rate as the summary may show it: none where items were not run, and the
    failures outside the op lists named beside it."""
    not_run = (data.get("run") or {}).get("not_run") or 0
    text = (f"no pass rate: {not_run} items not run" if not_run
            else f"pass rate **{percent(pass_rate(data['summary']))}**")
    count, detail = outside_problems(data)
    if count:
        text += f"; **{count} failures outside the op lists** ({detail})"
    return text
