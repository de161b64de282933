"""Autocast under ``torch.func`` transforms: ``vmap`` over a batch of each op list's calls,
``grad`` and ``jacrev`` of each entry's scalar output, ``functional_call`` of a small
module: the same dtypes and values as without the transform, forward and backward."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("transforms", "torch.func.vmap/grad/jacrev over the op lists' calls and "
          "functional_call of a module give the dtypes and values they give untransformed",
          needs_values=True, entry_skips=True),
)

from amp_conformance.checks.transforms.check import FIXTURES, params  # noqa: E402

PARAMS = {FIXTURES: params}
