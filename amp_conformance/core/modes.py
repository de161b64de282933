"""The suite's own steps, outside every user mode.

A backend may be built from Python modes that stay active in the whole process (or in the
thread that entered them): a ``TorchFunctionMode`` that lowers torch calls, a
``TorchDispatchMode`` that sees every aten op, tensor-less ones included
(``aten::promote_types``, ``aten::result_type``, ``aten::can_cast``), and raises its own
exception class for what it lacks. Only the op under test, its control on the device and
making inputs there may meet such modes; the suite's dtype arithmetic and its comparisons
run under :func:`outside_modes` (a backend's tensors read themselves back to the host
through their own class).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils._python_dispatch import _disable_current_modes


@contextlib.contextmanager
def outside_modes() -> Iterator[None]:
    """Every torch function mode and every dispatch mode of this thread off (the modes are
    back on exit, in their order)."""
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        yield
