"""The registry of checks: every family of conformance checks, declared once.

A check's name is what the suite function's ``@pytest.mark.amp_check(name)`` says, what an
op-list ``skip`` may name with ``check = "..."``, a column of the report and what a vendor's
capabilities can switch off. Parametrization, skip validation, capabilities and the report
all read this table, so adding a check is one :func:`register` call plus one suite function.

Its home is :mod:`amp_conformance.core`, below the schema, which validates op-list skip
keys against the names: it imports nothing of the suite but ``core``. The not-applicable
rules that need a checks module (``backward``, ``compiled_policy``) are attached by
:mod:`amp_conformance.checks.registry` (:func:`attach`), which re-exports this module and is
what the plugin reads; every arrow points down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amp_conformance.core import devices


@dataclass(frozen=True)
class Check:
    """One family of checks.

    Fields, and who reads them:

    - ``name``: the ``amp_check`` marker of its suite functions; op-list ``skip.check``;
      report column and ``check`` field (``plugin.report``).
    - ``doc``: one line for ``docs/architecture.md`` and ``--help`` style listings.
    - ``per_entry``: parametrized over op-list entries (``amp_case``: one item per device,
      amp dtype and entry) rather than per amp dtype (``amp_dtype``); the report's op
      matrix shows per-entry checks as columns (``plugin.parametrize``, ``plugin.report``).
    - ``needs_values``: compares values, so it does not apply to fake tensors; its items are
      generated and skipped with that reason under ``--fake`` (``plugin.parametrize``).
    - ``capability``: a vendor capability it needs (``--capabilities``); a device that
      declares it absent gets every item of the check skipped with the declared reason
      (``plugin.vendor``).
    - ``not_applicable``: for per-entry checks, why the check does not apply to a case
      (``Case`` -> reason or None), beyond the entry's own skips and version bounds.
    - ``opt_in``: the option that turns an opt-in tier on (its items exist only then); a
      tier whose every item skips for one cause fails the run (``plugin.outcomes``).
    """

    name: str
    doc: str
    per_entry: bool = False
    needs_values: bool = False
    capability: str | None = None
    not_applicable: Callable[[Any], str | None] | None = None
    opt_in: str | None = None


REGISTRY: dict[str, Check] = {}


class UnknownCheck(KeyError):
    """A check name that no registry row declares."""

    def __str__(self) -> str:
        return str(self.args[0])


def register(check: Check) -> Check:
    if check.name in REGISTRY:
        raise ValueError(f"check {check.name!r} registered twice")
    REGISTRY[check.name] = check
    return check


def get(name: str) -> Check:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownCheck(f"unknown check {name!r}; registered: {', '.join(REGISTRY)}") from None


def attach(name: str, not_applicable: Callable[[Any], str | None]) -> Check:
    """Give the registered check ``name`` its not-applicable rule (one that lives in a
    checks module, which this module must not import)."""
    REGISTRY[name] = dataclasses.replace(get(name), not_applicable=not_applicable)
    return REGISTRY[name]


def names(per_entry: bool | None = None) -> tuple[str, ...]:
    """Registered check names in registration order (only per-entry ones, or only others)."""
    return tuple(c.name for c in REGISTRY.values() if per_entry is None or c.per_entry == per_entry)


#: docs/checks.md's markers (the table is printed by ``python -m amp_conformance.checks.registry``)
BEGIN = "<!-- checks: generated from amp_conformance/checks/registry.py -->"
END = "<!-- end of generated checks -->"


def markdown() -> str:
    """The table of registered checks, as docs/checks.md shows it (checked by tests/test_readme.py)."""
    rows = ["| check | items | needs values | capability | what it checks |",
            "| --- | --- | --- | --- | --- |"]
    for c in REGISTRY.values():
        items = "per op-list entry" if c.per_entry else "per device / amp dtype"
        rows.append(f"| `{c.name}` | {items} | {'yes' if c.needs_values else 'no'} | "
                    f"{c.capability or '—'} | {c.doc} |")
    return "\n".join(rows) + "\n"


# -- the not-applicable rules of the per-entry checks ---------------------------------

_FAKE_NO_VALUES = "not applicable in --fake mode: fake tensors carry no values to compare"
_BANNED_NO_OUTPUT = "not applicable: a banned op has no output under autocast"


def _numerics(case: Any) -> str | None:
    if case.target.fake:
        return _FAKE_NO_VALUES
    if case.entry.policy == "banned":
        return _BANNED_NO_OUTPUT
    return None


def _outside(case: Any) -> str | None:
    if case.entry.policy == "banned":
        return "not applicable: the policy check of a banned op also runs it outside autocast"
    return None


def _legacy(case: Any) -> str | None:
    device = case.target.device
    if devices.legacy_autocast(device) is None:
        return f"not applicable: {device} has no legacy torch.{device}.amp.autocast"
    if case.target.fake:
        return "not applicable in --fake mode: the legacy entry point needs the device"
    if case.entry.policy == "banned":
        return _BANNED_NO_OUTPUT
    return None


# -- the checks ------------------------------------------------------------------------

register(Check("policy", "inside autocast every variant of an entry gives the expected dtypes, "
               "and the variants agree; a banned op raises its error", per_entry=True))
register(Check("numerics", "the autocast output equals a control run with autocast off on "
               "inputs cast by hand", per_entry=True, needs_values=True, not_applicable=_numerics))
register(Check("outside", "outside autocast the call runs in its input dtypes, untouched",
               per_entry=True, not_applicable=_outside))
register(Check("legacy", "the deprecated torch.<device>.amp.autocast gives torch.autocast's "
               "result and warns", per_entry=True, needs_values=True, not_applicable=_legacy))
register(Check("cast_cache", "a float32 parameter is cast once per outermost region, and only "
               "then", needs_values=True, capability="cast_cache"))
register(Check("eligibility", "only floating, non-float64 tensors of the device are cast"))
register(Check("regions", "region nesting, enabled=False, the decorator form and the default "
               "dtype restore the autocast state exactly"))
register(Check("errors", "bad autocast calls raise or warn with the documented message"))
register(Check("custom_fwd", "torch.amp.custom_fwd/custom_bwd cast inputs and carry the "
               "forward's state into backward"))
register(Check("properties", "Hypothesis properties: the region stack machine and the "
               "eligibility of each cast policy"))
register(Check("coverage", "every overload of the device's autocast policy is covered by an "
               "entry or excluded with a reason"))
# -- autocast in training, device-generic (issue #12 part A; checks/training) ----------
register(Check("checkpoint", "torch.utils.checkpoint recomputes in the forward's autocast "
               "state and matches the un-checkpointed outputs and gradients",
               capability="checkpoint"))
register(Check("threads", "autocast state is per thread, the cast cache is cleared for every "
               "thread, backward threads see the caller's autocast state"))
register(Check("cache_interactions", "the cast cache with inference_mode, no_grad/grad "
               "passes, retain_graph and many no_grad iterations"))
register(Check("rnn_modules", "LSTM/GRU/RNN modules under autocast: output dtypes, float32 "
               "grads of float32 parameters"))
register(Check("api_surface", "legacy and device-module autocast getters, setters and "
               "decorators agree with torch.autocast's state"))
register(Check("gradscaler", "GradScaler: the unscale and update-scale kernels against plain "
               "ops and a model, the scaler's contract, scaled training against a control"))
register(Check("gradscaler_fused", "GradScaler with fused=True SGD/Adam/AdamW: scaled training "
               "against a control, an inf skips its step", needs_values=True,
               capability="fused_optimizers"))
register(Check("gradscaler_sparse", "GradScaler with sparse gradients, including uncoalesced "
               "float16 ones whose sum overflows", needs_values=True, capability="sparse_grads"))
# -- torch.compile and torch.export under autocast (issue #14; checks/compile) ----------

register(Check("compile_regions", "autocast regions traced by torch.compile (inside, around, "
               "nested, decorator, legacy, graph break, exception, ambient changes, a fresh "
               "compile in another region) and kept by torch.export give eager's dtypes, "
               "values and state", capability="compile"))
register(Check("compiled_policy", "opt-in (--amp-compile BACKEND): each entry's policy check "
               "compiled agrees with eager in dtype and value", per_entry=True,
               capability="compile", opt_in="--amp-compile"))
# (its rule: checks.compile.per_entry, attached in checks/registry.py)

# -- gradients through autocast, per entry (issue #12 part B; checks/backward.py) -----------
register(Check("backward", "gradients through autocast (backward outside the region) reach "
               "every float32 input in its dtype and equal the hand-cast control's",
               per_entry=True, needs_values=True))  # rule: checks.backward (checks/registry.py)

# -- the autocast wrappers libraries ship, opt-in (issue 21; checks/wrappers) ------------
register(Check("wrappers", "opt-in (--wrapper MODULE:NAME): a library's autocast region "
               "factory or forward decorator keeps its declaration and autocast's contract",
               opt_in="--wrapper"))

# -- the operator surface: every OpInfo sample, opt-in (issue 25; checks/opinfo) ----------
register(Check("opinfo", "opt-in (--amp-opinfo): every sample form of every OpInfo of the "
               "running release's op_db: no new errors inside autocast, the declared policy's "
               "dtypes and values where a call enters policy kernels, eager's where none",
               opt_in="--amp-opinfo"))
