"""Failure messages of the op-list checks: what was checked, what went wrong, how to reproduce."""

from __future__ import annotations

from typing import Any

import torch

from amp_conformance.checks.case import Case
from amp_conformance.core.casting import output_dtypes
from amp_conformance.core.errors import ConformanceFailure
from amp_conformance.schema import argspec
from amp_conformance.schema.oplist import Entry, variants


def describe(case: Case) -> str:
    e = case.entry
    return (
        f"{e.qualname} [entry {e.id}, category {e.category}, {e.path}] on {case.target}, "
        f"autocast dtype {case.amp_dtype}"
    )


def _call_source(entry: Entry, variant: str) -> str:
    if variant.startswith("Tensor."):
        return f"args[0].{entry.op}(*args[1:], **kwargs)"
    return f"{variant}(*args, **kwargs)"


def reproduction(case: Case, variant: str, expected: torch.dtype | None, region: str = "inside") -> str:
    e, dev = case.entry, case.target.device
    args = ", ".join(argspec.render(s, dev, case.amp_dtype) for s in e.args)
    kwargs = ", ".join(f"{k!r}: {argspec.render(s, dev, case.amp_dtype)}" for k, s in e.kwargs.items())
    lines = [
        "import torch",
        f"g = torch.Generator().manual_seed({case.seed})",
        f"args = ({args}{',' if len(e.args) == 1 else ''})",
        f"kwargs = {{{kwargs}}}",
    ]
    call = _call_source(e, variant)
    if region == "inside":
        lines.append(f"with torch.autocast({dev!r}, dtype={case.amp_dtype}):")
        lines.append(f"    out = {call}")
    else:
        lines.append(f"out = {call}")
    lines.append(f"print([t.dtype for t in (out if isinstance(out, (tuple, list)) else [out])])"
                 f"  # expected {expected}")
    if case.target.fake:
        lines.insert(0, "# fake: run inside torch._subclasses.fake_tensor.FakeTensorMode("
                        "allow_non_fake_inputs=True), switching the autocast state on with "
                        "torch.set_autocast_enabled/set_autocast_dtype")
    return "\n".join("    " + line for line in lines)


def _fail(case: Case, problems: list[str], variant: str, expected, region="inside") -> None:
    body = "\n".join(f"  {p}" for p in problems)
    raise ConformanceFailure(
        f"{describe(case)}:\n{body}\n  reproduce:\n{reproduction(case, variant, expected, region)}"
    )


def _dtype_problems(name: str, out: Any, expected: Any, where: str) -> list[str]:
    got = output_dtypes(out)
    if isinstance(expected, tuple):
        head = expected[:-1] if expected[-1] is ... else expected
        if tuple(got[:len(head)]) != head or (head is expected and len(got) != len(head)):
            return [f"{name} {where}: output dtypes {got}, expected {list(expected)}"]
        return []
    if expected is None:
        return [] if not got else [f"{name} {where}: returned tensors of {got}, expected no tensor"]
    if not got:
        return [f"{name} {where}: returned {type(out).__name__}, expected a {expected} tensor"]
    if any(d != expected for d in got):
        shown = got[0] if len(got) == 1 else got
        return [f"{name} {where}: output dtype {shown}, expected {expected}"]
    return []


def callables(case: Case) -> list[tuple[str, Any]]:
    """The entry's variants (the namespace function, the Tensor method) as (name, function);
    an entry with none in this torch is a failure of its own."""
    found = variants(case.entry)
    if not found:
        raise ConformanceFailure(f"{describe(case)}: no callable found for {case.entry.qualname}")
    return found
