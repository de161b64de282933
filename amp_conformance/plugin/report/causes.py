"""Failures (and skips) grouped by cause: a vendor facing 255 red items with one cause
reads one row, not 255.

An item's *cause* is the exception type and the telling line of its message
(:func:`amp_conformance.core.errors.headline`) with what names the item masked:
its op and entry (but for "``<device>`` has no kernel for ``aten::X``", one cause per op),
the autocast dtypes in every spelling (a message names float16 and
bfloat16 in PyTorch's words, ``Half`` and ``'BFloat16'``, as often as in ours), ``aten::``
op names, file paths (only what is a path: ``custom_fwd/custom_bwd`` and ``127/127`` are
words and numbers) and every number (ids, sizes, addresses, HLO instruction numbers).
Items whose causes are equal are one row, largest first. Pure functions of a report's
``results`` (or of rows shaped like them), shared by the JSON, HTML and Markdown reports,
``python -m amp_conformance run``'s ending line and the terminal summary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from amp_conformance.core.errors import headline
from amp_conformance.plugin.report.banner import PROBLEMS

_ENTRY = re.compile(r"\s*\[entry [^\]]*\]")
_ATEN = re.compile(r"\b(aten|prims|xla)::[A-Za-z0-9_.]+")
_HLO = re.compile(r"%[A-Za-z_][\w.-]*")  # XLA instruction names: %multiply.12, %p2.3
_AMP_DTYPE = re.compile(r"\b(?:torch\.(?:b?float16|half)|b?float16|(?:c10::|at::k|ScalarType::)?"
                        r"(?:Half|BFloat16)|b?f16|fp16)\b")
#: an absolute path (its ``/`` starts a word: not the one of ``custom_fwd/custom_bwd``), or a
#: relative one naming a file
_PATH = re.compile(r"(?<![\w./-])(?:[A-Za-z]:)?/[\w.@+-]+(?:/[\w.@+-]+)*/?"
                   r"|(?<![\w./-])[\w.@+-]+(?:/[\w.@+-]+)+\.(?:py|pyi|toml|txt|json|md|html|"
                   r"cpp|cc|cu|h|hpp|so|yaml|yml|log|ini|cfg)\b")
_NUMBER = re.compile(r"(?<!\w)(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?!\w)")
_SPACE = re.compile(r"\s+")
#: a kernel the device lacks is one cause per op (plugin/missing_kernels.py): kept whole
_NO_KERNEL = re.compile(r"^.*?\S+ (?:has no kernel for|cannot run) [\w.:]+"
                        r"(?: \(outside autocast too\))?")
#: a backend's limit (plugin/limits.py) is one cause per limit: kept whole, probe aside
_LIMIT = re.compile(r"^not applicable: \S+ limit: .+?(?= \(probe: |$)")


def _names(result: dict[str, Any]) -> list[str]:
    """What names this item in its own message: the op (``torch.mm``, ``Tensor.mm``,
    ``mm``), the entry id, the test's parameter id; longest first, so the op's qualified
    name is masked before its last part."""
    names = {result.get("param") or "", result.get("entry") or ""}
    op = result.get("op") or ""
    if op:
        names |= {op, op.rsplit(".", 1)[-1], f"Tensor.{op.rsplit('.', 1)[-1]}"}
    return sorted((n for n in names if len(n) > 1), key=len, reverse=True)


def cause(result: dict[str, Any], limit: int = 240) -> str:
    """The item's cause: its message's telling line with what names the item masked."""
    text = headline(result.get("message")) or f"({result.get('outcome', 'no message')})"
    kernel = _NO_KERNEL.match(text) or _LIMIT.match(text)
    if kernel:
        return kernel.group(0)
    text = _ENTRY.sub("", text)
    for name in _names(result):
        text = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w])", "<op>", text)
    text = _AMP_DTYPE.sub("<amp dtype>", text)
    text = _ATEN.sub(lambda m: f"{m.group(1)}::<op>", text)
    text = _HLO.sub("%<hlo>", text)
    text = _PATH.sub("<path>", text)
    text = _NUMBER.sub("N", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group(results: Iterable[dict[str, Any]], outcomes: tuple[str, ...] = PROBLEMS
          ) -> list[dict[str, Any]]:
    """The items of ``outcomes`` grouped by :func:`cause`: ``[{"cause", "count", "example",
    "items"}]``, largest first (then by first node id: the same order serial and under
    xdist); ``example`` is the first item's own line, unmasked; ``items`` their node ids,
    sorted."""
    rows: dict[str, dict[str, Any]] = {}
    for result in sorted(results, key=lambda r: r.get("nodeid") or ""):
        if result.get("outcome") not in outcomes:
            continue
        key = cause(result)
        row = rows.setdefault(key, {"cause": key, "count": 0,
                                    "example": headline(result.get("message")) or key,
                                    "items": []})
        row["count"] += 1
        row["items"].append(result.get("nodeid"))
    return sorted(rows.values(), key=lambda r: -r["count"])


def of_results(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The report's ``causes``: its failures and its skips, each grouped by cause, and the
    backend's limits (the skips that name one)."""
    skips = group(results, ("skipped",))
    return {"failures": group(results), "skips": skips,
            "limits": [r for r in skips if _LIMIT.match(r["cause"])]}


def limits_line(data: dict[str, Any]) -> str | None:
    """``"limits: autograd does not reach its tensors (90 items); …"``, or None."""
    rows = (data.get("causes") or {}).get("limits")
    if rows is None:
        rows = of_results(data.get("results") or [])["limits"]
    if not rows:
        return None
    said = [f"{r['cause'].split(' limit: ', 1)[1]} ({r['count']} items)" for r in rows]
    return f"limits of {data.get('device') or 'the device'}: {'; '.join(said)}"


def skips_by_family(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per check family with skipped items: why, grouped as :func:`group` groups them."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for r in data.get("results") or ():
        if r.get("outcome") == "skipped":
            by_family.setdefault(r.get("check") or "other", []).append(r)
    return {family: group(rows, ("skipped",)) for family, rows in by_family.items()}


def headcount(rows: list[dict[str, Any]]) -> str:
    """``"459 failures in 12 causes"``."""
    total = sum(r["count"] for r in rows)
    return (f"{total} failure{'s' if total != 1 else ''} in {len(rows)} "
            f"cause{'s' if len(rows) != 1 else ''}")


def summary_line(rows: list[dict[str, Any]], shown: int = 3, width: int = 120) -> str | None:
    """``"459 failures in 12 causes: 255 × AttributeError: …; 80 × …; …"``, or None."""
    if not rows:
        return None
    parts = [f"{r['count']} × {_cut(r['cause'], width)}" for r in rows[:shown]]
    more = "; …" if len(rows) > shown else ""
    return f"{headcount(rows)}: {'; '.join(parts)}{more}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown(data: dict[str, Any], rows_shown: int = 10, items_shown: int = 3) -> list[str]:
    """Failures by cause, largest first, as Markdown lines (none when nothing failed)."""
    rows = (data.get("causes") or {}).get("failures") or []
    if not rows:
        return []
    lines = [f"### Failures by cause ({headcount(rows)})", ""]
    for row in rows[:rows_shown]:
        items = ", ".join(f"`{n}`" for n in row["items"][:items_shown])
        more = f", … and {row['count'] - items_shown} more" if row["count"] > items_shown else ""
        lines.append(f"- **{row['count']}** × {row['cause']} — {items}{more}")
    if len(rows) > rows_shown:
        lines.append(f"- … and {len(rows) - rows_shown} more causes (see the HTML report)")
    return [*lines, ""]


def html(data: dict[str, Any], escape: Any, kind: str = "failures") -> str:
    """Failures (``kind="failures"``) or skips (``"skips"``) by cause, largest first: one row
    each, its items folded. Skips come folded whole where nothing failed: a green run's
    page opens on its results, not on 17 rows of checks that did not apply."""
    rows = (data.get("causes") or {}).get(kind) or []
    if not rows:
        return ""
    title = {"failures": "Failures by cause", "skips": "Skips by cause"}[kind]
    body = "".join(
        f"<tr><td class='num'>{row['count']}</td><td>{escape(row['cause'])}<details>"
        f"<summary class='muted'>{escape(row['example'])}</summary>"
        + "<br>".join(f"<code>{escape(n)}</code>" for n in row["items"])
        + "</details></td></tr>" for row in rows)
    table = (f"<table><thead><tr><th>items</th><th>cause (op names, ids and numbers "
             f"masked)</th></tr></thead><tbody>{body}</tbody></table>")
    if kind == "skips" and not (data.get("causes") or {}).get("failures"):
        count = sum(r["count"] for r in rows)
        return (f"<h2 id='{kind}-by-cause'>{title}</h2><details><summary>{count} skipped "
                f"items in {len(rows)} causes</summary>{table}</details>")
    return f"<h2 id='{kind}-by-cause'>{title}</h2>{table}"
