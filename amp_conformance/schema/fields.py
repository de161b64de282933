"""The ``[[entry]]`` schema as a table: one row per field, read by everything that needs it.

The loader (:mod:`amp_conformance.schema.oplist`) parses an entry by walking
:data:`ENTRY_FIELDS`, ``discover`` writes entries in the table's order, and the field
reference of ``docs/oplists.md`` is generated from it (``python -m
amp_conformance.schema.fields --markdown``; a project test fails when the two differ), so
the schema, its validation and its documentation cannot drift apart. Adding a field is one
row here plus its attribute on :class:`amp_conformance.schema.oplist.Entry`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from amp_conformance.core import generated, hardware, registry
from amp_conformance.schema import validators as v
from amp_conformance.schema.categories import CATEGORIES, NAMESPACES
from amp_conformance.schema.defects import Defect, parse_use
from amp_conformance.schema.defects import registry as defect_registry
from amp_conformance.schema.validators import ALL_CHECKS, AMP_DTYPES, CASTS, NUMERICS, Invalid, invalid
from amp_conformance.schema.versions import version_gap


class _Marker:
    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


#: ``Field.default`` of a field that must be given.
REQUIRED = _Marker("required")


@dataclass(frozen=True)
class Derived:
    """``Field.default`` of a field whose default a cross-field rule of the loader computes
    (from the entry's category); ``text`` says how, for the documentation."""

    text: str


@dataclass(frozen=True)
class Field:
    """One key of a TOML table: how it is parsed and validated, and what it means.

    ``parse`` converts a present value (raising :class:`Invalid`); ``choices``, where set,
    are checked before it and listed in the documentation. An absent key takes ``default``
    (a TOML value, run through ``parse``), is an error (:data:`REQUIRED`), or is left None:
    for ``None`` defaults (``default_doc`` says what None means) and :class:`Derived` ones.
    """

    key: str
    type: str
    default: Any
    parse: Callable[[Any], Any] | None
    doc: str
    attr: str = ""
    choices: tuple[str, ...] = ()
    default_doc: str = ""
    #: what to say when a required field is missing (after "missing (required)")
    missing: Callable[[], str] | None = None

    @property
    def attribute(self) -> str:
        """The attribute of the parsed object that holds the value."""
        return self.attr or self.key

    def value(self, table: Mapping[str, Any]) -> Any:
        """The parsed value of this field in ``table`` (raises Invalid)."""
        if self.key not in table:
            if self.default is REQUIRED:
                raise invalid("missing (required)" + (f": {self.missing()}" if self.missing else ""))
            if self.default is None or isinstance(self.default, Derived):
                return None
            return self.convert(self.default)
        return self.convert(table[self.key])

    def convert(self, value: Any) -> Any:
        if self.choices and (not isinstance(value, str) or value not in self.choices):
            raise invalid(f"unknown value {value!r}; allowed: {', '.join(self.choices)}")
        return self.parse(value) if self.parse is not None else value

    def default_text(self) -> str:
        if self.default_doc:
            return self.default_doc
        if self.default is REQUIRED:
            return "required"
        if isinstance(self.default, Derived):
            return self.default.text
        if self.default is None:
            return "none"
        return f"`{_toml(self.default)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return "[]" if isinstance(value, list) else "{}" if isinstance(value, dict) else repr(value)


# -- skips -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Skip:
    """Where an entry cannot be checked: the conditions, the checks it concerns, the reason."""

    reason: str
    #: amp_dtype / numerics / fake / hip / requires values that must all hold
    conditions: Mapping[str, Any]
    #: the per-entry checks switched off; None: every one (``check = "all"``)
    checks: tuple[str, ...] | None = None

    def applies(self, amp_dtype: torch.dtype, numerics: str, fake: bool, check: str | None) -> bool:
        """Whether the skip holds for ``check`` (None: a caller asking for no particular
        check, which only ``check = "all"`` skips concern) in this run."""
        if self.checks is not None and check not in self.checks:
            return False
        values = {
            "amp_dtype": str(amp_dtype).removeprefix("torch."),
            "hip": torch.version.hip is not None,
            "numerics": numerics,
            "fake": fake,
        }
        if any(values[k] != v for k, v in self.conditions.items() if k in values):
            return False
        since, until = self.conditions.get("since"), self.conditions.get("until")
        if (since or until) and version_gap(since, until, None) is not None:
            return False
        requires = self.conditions.get("requires")
        return requires is None or hardware.missing(requires, amp_dtype) is not None

    def describe(self, amp_dtype: torch.dtype) -> str:
        """The skip reason, with what the machine probe found where the skip names one."""
        requires = self.conditions.get("requires")
        found = hardware.missing(requires, amp_dtype) if requires else None
        return f"{self.reason} [probed here: {found}]" if found else self.reason


#: The keys of one ``skip`` table; the ones between ``check`` and ``reason`` are conditions.
SKIP_FIELDS: tuple[Field, ...] = (
    Field("check", "string or array", REQUIRED, v.checks,
          "The checks the skip switches off for this entry: the name of one (`policy`, "
          "`numerics`, `outside`, `legacy`, another per-entry check of "
          "`amp_conformance.checks.registry`, or `transforms`, whose items call each entry), "
          "an array of names, or `\"all\"` for every one of them. Required, so that a skip "
          "meant for one check never silently switches off the others.", attr="checks",
          missing=lambda: 'name the check(s) this skip switches off: check = "<check>", an '
                          'array of names, or check = "all" (checks that call each entry: '
                          f'{", ".join(registry.skippable())})'),
    Field("amp_dtype", "string", None, None,
          "The skip holds under this autocast dtype only.", choices=AMP_DTYPES, default_doc="any"),
    Field("numerics", "string", None, None,
          "The skip holds under this `--numerics` mode only.", choices=NUMERICS, default_doc="any"),
    Field("fake", "bool", None, v.boolean,
          "The skip holds with `--fake` (`true`) or on the real device (`false`) only.",
          default_doc="any"),
    Field("hip", "bool", None, v.boolean,
          "The skip holds on a ROCm (`true`) or a non-ROCm (`false`) build of torch only.",
          default_doc="any"),
    Field("requires", "string", None, None,
          "A feature of the running machine, probed once per run (`amp_conformance.core.hardware`): "
          "the skip holds only where the probe finds it missing for the autocast dtype, e.g. "
          "`onednn_lstm` (oneDNN's LSTM primitive, absent for bfloat16 on AVX2-only CPUs and for "
          "float16 without AVX512-FP16/AMX). Never write a hardware expectation that holds only "
          "on the machine the list was written on.", choices=tuple(hardware.PROBES),
          default_doc="any machine"),
    Field("since", "string", None, v.version,
          "The skip holds on this torch release and later ones only (`\"2.9\"`).",
          default_doc="any torch"),
    Field("until", "string", None, v.version,
          "The skip holds on torch releases before this one only: for a limit of an older "
          "torch (a fake kernel it lacks, a message it words otherwise), with the release "
          "that lifted it.", default_doc="any torch"),
    Field("reason", "string", REQUIRED, v.reason,
          "Why the check cannot be made there, shown as the skip reason. Only for what cannot "
          "be checked, never to hide a mismatch."),
)
SKIP_KEYS = tuple(f.key for f in SKIP_FIELDS)
SKIP_CONDITIONS = tuple(f.key for f in SKIP_FIELDS if f.key not in ("check", "reason"))


def parse_skip(table: Any, where: str = "") -> Skip:
    """One ``skip`` table (raises Invalid with every problem, sub-fields under ``where``)."""
    if not isinstance(table, dict):
        raise invalid('expected a table {<condition> = <value>, check = ..., reason = "..."}',
                      where)
    problems = [(f"{where}.{k}", f"unknown skip key; allowed: {', '.join(SKIP_KEYS)}")
                for k in sorted(set(table) - set(SKIP_KEYS))]
    values = {}
    for f in SKIP_FIELDS:
        try:
            values[f.key] = f.value(table)
        except Invalid as exc:
            problems.extend((f"{where}.{f.key}{sub}", message) for sub, message in exc.problems)
    conditions = {k: values[k] for k in SKIP_CONDITIONS if values.get(k) is not None}
    if not problems and values["check"] is None and not conditions:
        problems.append((where, f'check = "{ALL_CHECKS}" with no condition would switch the '
                                f"entry off everywhere; add a condition ({', '.join(SKIP_CONDITIONS)})"))
    if problems:
        raise Invalid(*problems)
    return Skip(values["reason"], conditions, values["check"])


def _skips(value: Any) -> tuple[Skip, ...]:
    if not isinstance(value, list):
        raise invalid(f"expected an array of skip tables, got {value!r}")
    skips, problems = [], []
    for i, table in enumerate(value):
        try:
            skips.append(parse_skip(table, f"[{i}]"))
        except Invalid as exc:
            problems.extend(exc.problems)
    if problems:
        raise Invalid(*problems)
    return tuple(skips)


def _backward(value: Any) -> str | None:
    """``true``: the backward check runs (None); a string: why the op is not differentiable."""
    if value is True:
        return None
    if isinstance(value, str) and value.strip():
        return value
    raise invalid("expected true, or a string saying why the op is not differentiable "
                  f"(the error observed), got {value!r}")


def _pattern(value: Any) -> str:
    """A non-empty regular expression that compiles (checked when the list is loaded)."""
    text = v.string(value)
    if not text.strip():
        raise invalid("expected a non-empty regular expression of the error message")
    try:
        re.compile(text)
    except re.error as exc:
        raise invalid(f"not a regular expression ({exc}): {text!r}") from None
    return text


def _why(value: Any) -> str:
    """A non-empty explanation."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"expected a string saying why, got {value!r}")
    return value


@dataclass(frozen=True)
class CompiledDefect:
    """An entry's ``compiled_defect``: PyTorch's compiled call departs from its eager one."""

    id: str
    #: the output dtype(s) compiled PyTorch gives today, in the words of ``expect``
    expect: str | tuple[str, ...]
    #: the torch.compile backends it was seen with; any other backend must agree with eager
    backends: tuple[str, ...]
    #: with ``expect = "error"``: the start of what the compiled call raises today
    error: str | None = None

    @property
    def defect(self) -> Defect:
        return defect_registry()[self.id]

    def applies(self, backend: str | None) -> bool:
        """Whether a compiled call with ``backend`` may show it on the running torch."""
        return backend in self.backends and self.defect.applies()


_COMPILED_KEYS = ("id", "expect", "backends", "error")


def _compiled_defect(value: Any) -> CompiledDefect:
    """An entry's ``compiled_defect`` table (raises Invalid naming each sub-field)."""
    if not isinstance(value, dict):
        raise invalid('expected a table {id = "...", expect = "...", backends = [...]}')
    problems = [(f".{k}", f"unknown key; allowed: {', '.join(_COMPILED_KEYS)}")
                for k in sorted(set(value) - set(_COMPILED_KEYS))]
    if value.get("id") not in defect_registry():
        problems.append((".id", f"unknown defect {value.get('id')!r}; recorded in "
                                f"oplists/defects.toml: {', '.join(sorted(defect_registry()))}"))
    expect = None
    try:
        expect = v.dtypes(("amp", "widest", "error"))(value.get("expect"))
    except Invalid as exc:
        problems.extend((f".expect{sub}", m) for sub, m in exc.problems)
    error = value.get("error")
    if (expect == "error") != (error is not None):
        problems.append((".error", 'the start of the error message, with expect = "error" '
                                   'and only with it'))
    elif error is not None and not (isinstance(error, str) and error.strip()):
        problems.append((".error", f"expected a non-empty string, got {error!r}"))
    backends = value.get("backends")
    if not isinstance(backends, list) or not backends or not all(
            isinstance(b, str) and b for b in backends):
        problems.append((".backends", "expected a non-empty array of the torch.compile "
                                      f"backends it was seen with, got {backends!r}"))
    if problems:
        raise Invalid(*problems)
    return CompiledDefect(value["id"], expect, tuple(backends), error)


# -- the entry table -------------------------------------------------------------------

#: Every key of an ``[[entry]]`` table, in the order ``discover`` writes them.
ENTRY_FIELDS: tuple[Field, ...] = (
    Field("id", "string", REQUIRED, v.identifier,
          "Unique id (letters, digits, `_.+-`) across the device's merged lists: the last part "
          "of every test id `<device>-<amp dtype>-<category>-<id>`, and the seed of the inputs."),
    Field("op", "string", REQUIRED, v.string,
          "The function name (`mm`, `softmax`, `fft_fft`) every per-entry check calls, looked up "
          "in `namespace` and as a `Tensor` method; it must exist in the running torch where "
          "the entry applies. An operator library's op is named with its library "
          "(`torchvision::roi_align`, a `torch.library.custom_op`): it is called as "
          "`torch.ops.<library>.<op>`, with no `Tensor` method, once `[list] imports` has "
          "imported the module that defines it."),
    Field("category", "string", REQUIRED, None,
          "The cast policy and default namespace (see *Categories*); the policy gives the "
          "defaults of `expect` and `cast`, and the name is part of the test id.",
          choices=tuple(CATEGORIES)),
    Field("namespace", "string", Derived("the category's"), None,
          "Where `op` is looked up, overriding the category's: `torch._C._VariableFunctions` "
          "holds the raw bindings (for overloads a Python wrapper reroutes, e.g. `norm.Scalar`, "
          "`stft.center`), `torch.ops.aten` the overloads no binding exposes (e.g. "
          "`_thnn_fused_lstm_cell`), `Tensor` the method only.", choices=NAMESPACES),
    Field("method", "bool", None, v.boolean,
          "Whether the checks also call `Tensor.<op>` (and compare it with the function); "
          "`false` calls the function only.", default_doc="when `Tensor.<op>` exists"),
    Field("args", "array of specs", [], v.args,
          "Positional argument specs (see *Argument specs*), built alike for every check."),
    Field("kwargs", "table of specs", {}, v.kwargs,
          "Keyword argument specs (see *Argument specs*)."),
    Field("expect", "string or array", Derived("the category's policy"),
          v.dtypes(v.EXPECT_WORDS),
          "Output dtype inside autocast, checked by `policy`: a dtype name (as in *Argument "
          "specs*), `amp` (the "
          "autocast dtype under test), `widest` (the widest eligible input), `first` (the dtype of "
          "the first floating tensor argument: a kernel that computes in another dtype and casts "
          "its output back, as torchvision's do; the `numerics` control's output is cast back "
          "alike), `none` (no tensor output), `error` (banned); or an array, one per output "
          "tensor, which may end in `\"...\"` to leave the remaining outputs (bookkeeping "
          "such as RNG state) unchecked."),
    Field("cast", "string", Derived("the category's policy"), None,
          "What the `numerics` control casts eligible inputs to: the autocast dtype, a fixed "
          "dtype (for kernels that ignore the autocast dtype), the widest input type, or "
          "`none` (the same call with autocast off; for an explicit `dtype` argument).",
          choices=CASTS),
    Field("expect_outside", "string or array", "inputs", v.dtypes(v.OUTSIDE_WORDS),
          "Output dtype outside autocast, checked by `outside`: `inputs` (the promoted input "
          "type), `amp`, a dtype, an array as for `expect`, `none`, or `error` when the op has "
          "no kernel for these input dtypes and raises there."),
    Field("error_outside", "string", None, _pattern,
          "A regular expression (Python `re`, searched for) that the message of the error "
          "raised outside autocast must match: required with `expect_outside = \"error\"`, so "
          "that `outside` fails on any other error. Write what torch was seen to say, e.g. "
          "`not implemented for 'Half'`, with a group alternating `BFloat16` and `Half` where "
          "the entry runs under both autocast dtypes."),
    Field("error", "string", None, v.string,
          "The start of the error message `policy` expects a banned op to raise inside "
          "autocast; required for the `banned` category."),
    Field("amp_dtypes", "array of strings", None, v.amp_dtypes,
          "The autocast dtypes the entry applies to (non-empty, of `float16`, `bfloat16`); "
          "under the others every check of the entry is skipped as not applicable.",
          default_doc="every amp dtype under test"),
    Field("since", "string", None, v.version,
          "The first torch version (`\"2.6\"`) the entry applies to; before it every check of "
          "the entry is skipped with the reason (and `op` need not exist).",
          default_doc="no bound"),
    Field("until", "string", None, v.version,
          "The first torch version the entry no longer applies to; later than `since`.",
          default_doc="no bound"),
    Field("tolerance", "table", None, v.tolerance,
          "`{rtol = ..., atol = ...}`, finite and >= 0: the tolerance of every value comparison "
          "(`numerics`, `outside`, `legacy`, the variants' agreement in `policy`) under "
          "`--numerics close`.", default_doc="`assert_close`'s per dtype"),
    Field("backward", "true or string", None, _backward,
          "Whether the `backward` check applies: `true` checks that gradients reach every "
          "float32 input through autocast and equal those through the hand-cast control; a "
          "string marks the op not differentiable here (integer or bool outputs, no derivative "
          "formula) and says why, quoting the error observed; the check is then skipped with "
          "it. Only for what autograd cannot do, never to hide a gradient mismatch.",
          default_doc="`true`"),
    Field("reference_defect", "table", None, parse_use,
          "PyTorch's own departure from this entry's intended `expect`, recorded in "
          "`oplists/defects.toml` (see *Reference defects*): `{id = \"<defect>\", expect = "
          "<what PyTorch gives today>, error = <start of its message, with expect = "
          "\"error\">, cast = <the numerics control's cast today, default \"none\">, kernel = "
          "<false where PyTorch has no Autocast kernel for it>}`. The per-entry checks that "
          "run the op inside autocast (`policy`, `numerics`, `backward`, `legacy`) pass when the "
          "device does either; the report says which it did. On a torch at or after the "
          "defect's `fixed` release only `expect` passes.", default_doc="none"),
    Field("compiled_defect", "table", None, _compiled_defect,
          "PyTorch's own departure in the compiled tier (`--amp-compile`), recorded in "
          "`oplists/defects.toml`: `{id = \"<defect>\", expect = <the output dtype(s) the "
          "compiled call gives today, or \"error\">, error = <start of its message, with "
          "expect = \"error\">, backends = [<the backends it was seen with>]}`. With "
          "one of those backends `compiled_policy` passes when the compiled call gives eager's "
          "dtypes and values or, where it does not, `expect` (and eager's shapes) or the "
          "error; the report says which. Any other backend must agree with eager. Only where "
          "it was observed.",
          default_doc="none"),
    Field("skip", "array of tables", [], _skips,
          "Where checks of the entry cannot be made: tables of conditions, `check` and "
          "`reason` (see *Skips* below).", attr="skips"),
    Field("passthrough", "string", None, _why,
          "For an entry whose policy casts (lower precision, float32, promote): why a kernel "
          "that casts nothing cannot fail its checks, e.g. builtin type promotion gives the "
          "promote policy's dtypes (`cat`), an explicit `dtype` decides the output, or under "
          "`--fake` a meta kernel lacks the real kernel's dtype check. The project test "
          "`tests/test_vacuity.py` runs each such entry against a pass-through kernel and "
          "requires this of exactly the entries that pass it.", default_doc="none: it can fail"),
    Field("note", "string", "", v.text,
          "Free text for readers (`discover` writes what it observed); no check reads it."),
    Field("override", "bool", False, v.boolean,
          "`true` to replace the entry of the same id from an earlier file or a base list "
          "(see *Merging*); an override of an id nobody defined is an error."),
)
ENTRY_KEYS: tuple[str, ...] = tuple(f.key for f in ENTRY_FIELDS)


# -- the documentation -----------------------------------------------------------------

BEGIN = ("<!-- generated from amp_conformance/schema/fields.py by "
         "`python -m amp_conformance.schema.fields --write docs/oplists.md`: edit the table there -->")
END = "<!-- end of the generated field reference -->"


def _table(rows: tuple[Field, ...]) -> list[str]:
    lines = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in rows:
        doc = f.doc + (f" Allowed: {', '.join(f'`{c}`' for c in f.choices)}." if f.choices else "")
        lines.append(f"| `{f.key}` | {f.type} | {f.default_text()} | {doc} |")
    return lines


def markdown() -> str:
    """The field reference of docs/oplists.md: the entry table, then the skip table."""
    lines = [*_table(ENTRY_FIELDS), "", "### Skips", "",
             "Each table of an entry's `skip` array switches the checks it names off, with its "
             "reason, where all of its conditions hold (everywhere without conditions; "
             "`check = \"all\"` needs one, or it would switch the entry off):", "",
             *_table(SKIP_FIELDS)]
    return "\n".join(lines) + "\n"


def section(text: str) -> str | None:
    """The generated part of a document (between the markers), or None without markers."""
    return generated.section(text, BEGIN, END)


def write(path: Path) -> bool:
    """Replace the generated part of ``path``; whether it changed."""
    return generated.write(path, BEGIN, END, markdown())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amp_conformance.schema.fields",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", action="store_true", help="print the field reference")
    group.add_argument("--write", metavar="DOC", type=Path,
                       help="replace the generated section of DOC (docs/oplists.md)")
    args = parser.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
    else:
        print(f"{args.write}: {'updated' if write(args.write) else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
