"""Draft declarations from a run: what a vendor reviews before its first declared run
(``python -m amp_conformance run --draft-declarations DIR``).

- ``DIR/capabilities.toml``: a check family that needs a capability
  (:mod:`amp_conformance.checks.registry`, ``capability``) and failed is drafted as that
  capability declared absent, its reason the failures' causes. Review each line: declare
  absent only what the device really lacks; the reason is printed beside every item the
  declaration skips. A limit the run's probes showed (:mod:`amp_conformance.plugin.limits`:
  its items were skipped, naming it) is drafted the same way, so that the declared run
  skips them without probing.
- ``DIR/xfail.txt``: every other failure, one commented-out line per item (``#xfail
  <test id>  # <cause>``), grouped by cause. None is active: an expected failure is a
  person's decision. Take a line by removing its ``#xfail `` mark.

Pure functions of a conformance report (``docs/report-schema.md``), and the writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amp_conformance.checks import registry
from amp_conformance.plugin.report import causes
from amp_conformance.plugin.report.banner import PROBLEMS

#: the mark of a drafted expected failure: ``sed -i 's/^#xfail //' xfail.txt`` takes them all
MARK = "#xfail "


def capability_of(result: dict[str, Any]) -> str | None:
    """The capability the item's check family needs, or None."""
    check = registry.REGISTRY.get(result.get("check") or "")
    return check.capability if check is not None else None


def item_id(nodeid: str) -> str:
    """``amp_conformance/suite/test_oplist.py::test_policy[...]`` -> ``test_policy[...]``
    (an expected-failures line matches the test id: the run's own directory does not
    matter)."""
    return nodeid.rsplit("::", 1)[-1]


#: a drafted expected failure's reason: its cause, cut (the group's header has it whole)
REASON_WIDTH = 100


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def capabilities_text(data: dict[str, Any]) -> str:
    """The drafted capabilities file."""
    failed = [r for r in data.get("results") or () if r.get("outcome") in PROBLEMS]
    by_capability: dict[str, list[dict[str, Any]]] = {}
    for result in failed:
        name = capability_of(result)
        if name is not None:
            by_capability.setdefault(name, []).append(result)
    lines = [f"# Capabilities of {data.get('device')}, drafted from a run (torch "
             f"{data.get('torch')}) by python -m amp_conformance run --draft-declarations.",
             "# Each line below stands for failures of a check family that needs it, or for a",
             "# limit the run's probes showed (its items were skipped). Review",
             "# every line: declare absent only what the device really lacks.",
             f"device = {_toml_string(str(data.get('device')))}", "", "[capabilities]"]
    reasons = []
    for name, results in sorted(by_capability.items()):
        rows = causes.group(results)
        why = "; ".join(f"{r['count']} × {_cut(r['cause'], REASON_WIDTH)}" for r in rows)
        lines.append(f"{name} = false  # {len(results)} failed: {why}")
        reason = "drafted from the run: " + _cut(rows[0]["cause"], REASON_WIDTH)
        reasons.append(f"{name} = {_toml_string(reason)}")
    for name, row in _limits(data).items():
        if name in by_capability:
            continue
        lines.append(f"{name} = false  # {row['count']} skipped: {row['cause']}")
        reasons.append(f"{name} = {_toml_string(row['example'].split(' limit: ', 1)[1])}")
    if not by_capability and not _limits(data):
        lines.append("# (no failure of a check that needs a capability, no limit)")
    return "\n".join([*lines, "", "[reasons]", *reasons]) + "\n"


def _limits(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The limits the run named, by the capability each takes away."""
    from amp_conformance.plugin.limits import LIMITS

    rows = causes.of_results(list(data.get("results") or ()))["limits"]
    return {limit.capability: row for row in rows for limit in LIMITS
            if row["cause"].endswith(f" limit: {limit.what}")}


def xfail_text(data: dict[str, Any]) -> str:
    """The drafted expected-failures file: every failure no drafted capability covers,
    commented out, grouped by cause; the declared expected failures that passed."""
    results = data.get("results") or ()
    failed = [r for r in results if r.get("outcome") in ("failed", "error", "unfinished")
              and capability_of(r) is None]
    lines = [f"# Expected failures of {data.get('device')}, drafted from a run (torch "
             f"{data.get('torch')}) by python -m amp_conformance run --draft-declarations.",
             f"# None is active: remove the '{MARK}' mark of each line you accept as a known",
             "# failure (the reason after '#' is the failure's cause; write your own).", ""]
    for row in causes.group(failed, ("failed", "error", "unfinished")):
        reason = _cut(row["cause"], REASON_WIDTH)
        lines.append(f"# {row['count']} × {row['cause']}")
        lines += [f"{MARK}{item_id(n)}  # {reason}" for n in row["items"]]
        lines.append("")
    passed = [r["nodeid"] for r in results if r.get("outcome") == "xpassed"]
    if passed:
        lines += ["# Declared expected failures that passed (strict: they fail the run): take",
                  "# their lines out of your expected-failures file:",
                  *(f"#   {item_id(n)}" for n in sorted(passed)), ""]
    if not failed and not passed:
        lines.append("# (no failure left to declare)")
    return "\n".join(lines).rstrip("\n") + "\n"


def write(data: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write both drafts into ``folder`` (replacing earlier drafts); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    capabilities, xfails = folder / "capabilities.toml", folder / "xfail.txt"
    capabilities.write_text(capabilities_text(data), encoding="utf-8")
    xfails.write_text(xfail_text(data), encoding="utf-8")
    return capabilities, xfails
