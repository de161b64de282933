"""The cast policy of each op-list entry, inside autocast.

Every variant of an entry (the namespace function, the Tensor method) gives the dtypes the
entry expects, enters the device's Autocast kernel where the policy is autocast's to apply
(``kernel_entry``: a pass-through kernel cannot pass), and the variants agree; a banned op
raises its error. ``property``: the same rule as a Hypothesis property over generated
shapes, dtypes, devices and values (only eligible inputs are cast, the result equals the
hand-cast control).
"""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("policy", "inside autocast every variant of an entry gives the expected dtypes, and "
          "the variants agree; a banned op raises its error; as a property too: only "
          "floating, non-float64 inputs of the device are cast", per_entry=True),
)

from amp_conformance.checks.policy.params import FIXTURES, policy_op_params  # noqa: E402

PARAMS = {FIXTURES: policy_op_params}
