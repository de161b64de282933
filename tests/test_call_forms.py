"""The forms of the property ops (``call_forms.FORMS``, checks/call_forms.py) and a vendor's
own: the ``pytest_amp_conformance_property_forms`` hook.

A hook's forms join ``call_forms.FORMS`` for the run only (``Settings.forms``): an op it adds
becomes a policy-property item of every policy whose op-list entries name it, a malformed
result is a usage error naming the hook and the key, and the op is really checked (a
planted bug in its kernel fails its item; examples/fakegpu adds ``layer_norm``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from amp_conformance.checks import profiles
from amp_conformance.checks.call_forms import FORMS, Lit, Sizes
from amp_conformance.checks.policy import property as policy_properties
from amp_conformance.core.target import Target
from amp_conformance.plugin import session_settings
from tests import children

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fakegpu"
SUITE = ("--pyargs", "amp_conformance.suite.test_properties", "-p", "no:randomly")
HOOK = session_settings.FORMS_HOOK
#: prelu is a lower-precision op of the cpu lists that FORMS does not call
PRELU_HOOK = f"""
from amp_conformance.checks.call_forms import Lit

def {HOOK}(config, device):
    return {{"prelu": lambda s: ((s.m, s.n), (s.n,))}}
"""


@pytest.fixture
def inner_run(pytester, monkeypatch):
    """Run pytest in-process; the profile it selects is restored after."""
    monkeypatch.setattr(profiles, "_selected", profiles._selected)
    return pytester


def _ids(result) -> list[str]:
    return [line.split("::", 1)[1] for line in result.stdout.lines if "::" in line]


def test_a_hook_op_becomes_items_of_its_policy(inner_run):
    assert "prelu" not in FORMS
    before = dict(FORMS)
    inner_run.makeconftest(PRELU_HOOK)
    result = inner_run.runpytest(*SUITE, "--collect-only", "-q", "-k", "policy")
    assert result.ret == 0, result.stdout.str()
    ids = _ids(result)
    for test in ("test_policy_casts_only_eligible_inputs", "test_policy_equals_hand_cast_control"):
        for dtype in ("bfloat16", "float16"):
            assert f"{test}[cpu-{dtype}-lower-prelu]" in ids
    assert not any("-prelu]" in i and "-lower-" not in i for i in ids)  # prelu is lower only
    assert FORMS == before  # the run's forms are its own: nothing global changed
    result = inner_run.runpytest(*SUITE, "-k", "bfloat16-lower-prelu")
    result.assert_outcomes(passed=2)


def test_without_the_hook_there_is_no_such_item(inner_run):
    result = inner_run.runpytest(*SUITE, "--collect-only", "-q", "-k", "policy")
    assert result.ret == 0 and not any("prelu" in i for i in _ids(result))


def test_results_merge_in_call_order_over_FORMS(pytester):
    """The implementation called last wins for an op both name; a hook may re-form a FORMS op."""
    pytester.makepyfile(early_forms=f"""
        def {HOOK}(config, device):
            return {{"exp": lambda s: ((1,),), "prelu": lambda s: ((s.m, s.n), (s.n,))}}
    """)
    pytester.makeconftest(f"""
        import pytest

        @pytest.hookimpl(trylast=True)
        def {HOOK}(config, device):
            return {{"exp": lambda s: ((2,),)}}
    """)
    pytester.syspathinsert()
    forms = session_settings.property_forms(pytester.parseconfigure("-p", "early_forms"), "cpu")
    sizes = Sizes(1, 2, 3, 4, 2)
    assert forms["exp"](sizes) == ((2,),) and forms["prelu"](sizes) == ((2, 4), (4,))
    assert FORMS["exp"](sizes) == ((2, 4),)


@pytest.mark.parametrize("body, message", [
    ('return ["prelu"]', "*conftest.py: hook {hook}: returned list [[]'prelu'[]]; expected a dict "
                         "{{op name: form}}, or None*"),
    ("return {3: lambda s: ((s.m,),)}", "*conftest.py: hook {hook}: key 3: the key is int, "
                                        "expected an op name*"),
    ('return {"prelu": ((2, 3), (3,))}', "*conftest.py: hook {hook}: key 'prelu': the form is "
                                         "tuple ((2, 3), (3,)), not callable*"),
    ('return {"prelu": lambda s: [(s.m, s.n)]}', "*key 'prelu': the form returned list "
                                                 "[[](3, 5)[]], expected a tuple*"),
    ('return {"prelu": lambda s: ((s.m, 2.5),)}', "*key 'prelu': argument 0 of the form's "
                                                  "tuple is (3, 2.5); expected a shape*"),
    ('return {"prelu": lambda s: (Lit(1),)}', "*key 'prelu': the form's tuple has no tensor*"),
    ('return {"prelu": lambda s: s.nope}', "*key 'prelu': the form raised AttributeError*"),
    ('raise RuntimeError("backend down")', "*conftest.py: hook {hook}: raised RuntimeError: "
                                           "backend down*"),
], ids=["list", "int-key", "not-callable", "list-form", "float-dim", "no-tensor", "form-raises",
        "hook-raises"])
def test_a_malformed_hook_result_is_a_usage_error_naming_hook_and_key(inner_run, body, message):
    inner_run.makeconftest(f"""
        from amp_conformance.checks.call_forms import Lit

        def {HOOK}(config, device):
            {body}
    """)
    result = inner_run.runpytest(*SUITE, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message.format(hook=HOOK)])


def test_candidates_use_the_forms_they_are_given():
    cpu, forms = Target("cpu"), {**FORMS, "prelu": lambda s: ((s.m, s.n), (s.n,))}
    ops = {c.op for c in policy_properties.candidates(cpu, torch.bfloat16, "lower")}
    with_hook = {c.op for c in policy_properties.candidates(cpu, torch.bfloat16, "lower",
                                                            forms=forms)}
    assert "prelu" not in ops and with_hook == ops | {"prelu"}
    assert policy_properties.not_candidate(cpu, torch.bfloat16, "lower", "prelu", forms=forms) is None
    only = {"prelu": forms["prelu"]}
    assert {c.op for c in policy_properties.candidates(cpu, torch.bfloat16, "lower",
                                                       forms=only)} == {"prelu"}


def test_forms_resolve_to_FORMS_plus_the_hooks_results(pytester):
    pytester.makeconftest(PRELU_HOOK)
    config = pytester.parseconfigure()
    forms = session_settings.property_forms(config, "cpu")
    assert set(forms) == set(FORMS) | {"prelu"}
    assert forms["prelu"](Sizes(1, 2, 3, 4, 2)) == ((2, 4), (4,))
    assert "prelu" not in FORMS and not isinstance(forms["mm"](Sizes(1, 2, 3, 4, 2))[0], Lit)


# -- fakegpu: the example's hook op is checked (subprocesses: the backend is global) ----


needs_python_backend = pytest.mark.skipif(
    not hasattr(torch.library, "get_kernel") or not hasattr(torch._C, "_acc"),
    reason="the example backend needs torch.library.get_kernel and torch._C._acc (Python device guard)",
)


def _fakegpu(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTEST_ADDOPTS", None)
    return children.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *args], cwd=EXAMPLE,
                          env=full_env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@needs_python_backend
def test_fakegpu_layer_norm_items_pass_and_its_dropped_kernel_fails_them():
    """layer_norm is in fakegpu's policy (fp32) but not in FORMS: the example's conftest
    adds its form; with its AutocastPrivateUse1 kernel dropped, its items fail."""
    args = ("--pyargs", "amp_conformance.suite.test_properties", "-k", "fp32-layer_norm")
    good = _fakegpu(*args, "-v")
    assert good.returncode == 0, good.stdout[-3000:] + good.stderr[-2000:]
    passed = set(re.findall(r"(test_policy_\w+\[fakegpu-\w+-fp32-layer_norm\]) PASSED", good.stdout))
    assert passed == {f"{t}[fakegpu-{d}-fp32-layer_norm]" for d in ("float16", "bfloat16")
                      for t in ("test_policy_casts_only_eligible_inputs",
                                "test_policy_equals_hand_cast_control")}
    bad = _fakegpu("--pyargs", "amp_conformance.suite.test_properties",
                   "-k", "fp32-layer_norm and casts_only", env={"FAKEGPU_DROP_AUTOCAST": "layer_norm"})
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert re.search(r"FAILED \S*test_policy_casts_only_eligible_inputs"
                     r"\[fakegpu-float16-fp32-layer_norm\]", bad.stdout)
    assert "fp32 policy casts eligible inputs to float32 [fp32]: torch.layer_norm on fakegpu" \
        in bad.stdout
