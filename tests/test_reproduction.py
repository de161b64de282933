"""The reproduction a failure prints (checks/reproduction.py) runs as Python code and
rebuilds the inputs the harness saw."""

import torch

from amp_conformance.checks.reproduction import reproduction
from tests.mutants import case_of


def test_reproduction_rebuilds_the_same_inputs():
    """The printed reproduction, run as code, gives what the harness saw."""
    case = case_of("cpu", "addmm", torch.bfloat16)
    source = reproduction(case, "torch.addmm", torch.bfloat16)
    namespace = {}
    exec("\n".join(line[4:] for line in source.splitlines()), namespace)  # noqa: S102
    args, kwargs = case.build_inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.addmm(*args, **kwargs)
    assert torch.equal(namespace["out"], expected)
