"""The suite's own steps never meet a backend's modes (core/modes.py): its dtype arithmetic
and its comparisons on the host run outside every torch function and dispatch mode, while
the mode stays in place for everything else."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from amp_conformance.core import casting
from amp_conformance.core.compare import compare
from amp_conformance.core.modes import outside_modes


class Refused(Exception):
    """A backend's own exception class: neither RuntimeError nor a torch message."""


class RefusesEverything(TorchDispatchMode):
    """Sees every aten op, the tensor-less dtype utilities included, and lowers none."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.seen.append(str(func))
        raise Refused(f"Operator with name {func} has no lowering")


class RefusesCalls(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        raise Refused(f"cannot lower {getattr(func, '__name__', func)}")


def test_the_dispatch_mode_sees_the_dtype_utilities_and_the_suite_does_not_call_them():
    with RefusesEverything() as mode:
        with pytest.raises(Refused, match="promote_types"):
            torch.promote_types(torch.float16, torch.bfloat16)
        assert casting.promote(torch.float16, torch.bfloat16) == torch.float32
        assert casting.promote(torch.int64, torch.bfloat16) == torch.bfloat16
        assert mode.seen == ["aten.promote_types.default"]  # the suite's own call: unseen


def test_host_comparisons_and_the_widest_dtype_run_outside_both_kinds_of_mode():
    a = torch.arange(4.0, dtype=torch.float16)
    b = torch.arange(4.0, dtype=torch.bfloat16)
    with RefusesCalls(), RefusesEverything() as mode:
        assert casting.widest_eligible([a, b], "cpu") == torch.float32
        compare(a, a, "bitwise", None, "same")
        assert mode.seen == []
        with outside_modes():
            assert torch.equal(a + 1, a.clone() + 1)  # every op: no mode in the way
        with pytest.raises(Refused):  # and the modes are back, in their order
            torch.add(a, 1)
