"""No check may provoke an asynchronous device error.

On CUDA an out-of-range index (index_select, gather, embedding, nll_loss's target, …) is a
device-side assert, not an exception: it leaves the process's device context unusable and
every later item fails. A scenario that needs "a kernel raises" must raise on the host,
synchronously, on every device. This test scans the package for calls of the ops whose bad
indices become device asserts; each must be listed here with why its indices are in
range, so a new one is looked at before it reaches a GPU. (The device-lost verdict is the
second line of defence: a device lost anyway is named once, never blamed on later items.)
"""

import re
from pathlib import Path

import pytest
import torch

from amp_conformance.checks.compile_regions import bodies

PACKAGE = Path(__file__).resolve().parent.parent / "amp_conformance"

#: ops whose out-of-range indices or invalid values are device-side asserts on CUDA
ASYNC_ERROR_OPS = (
    "index_select", "gather", "scatter", "scatter_add", "scatter_reduce", "index_put",
    "index_put_", "index_add", "index_copy", "index_fill", "take", "take_along_dim",
    "embedding", "embedding_bag", "nll_loss", "cross_entropy", "multinomial", "one_hot",
    "bincount", "_assert_async",
)
_CALL = re.compile(r"\b(" + "|".join(ASYNC_ERROR_OPS) + r")\(")

#: (path under amp_conformance/, op) -> why every index it is given is in range
REVIEWED = {
    ("checks/threads/check.py", "index_put"):
        "index = randint(0, 3) into a first dimension of size 3",
}


def _calls() -> set[tuple[str, str, int]]:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for match in _CALL.finditer(code):
                found.add((path.relative_to(PACKAGE).as_posix(), match.group(1), number))
    return found


def test_every_call_that_could_assert_on_a_device_is_reviewed():
    unreviewed = sorted(f"{path}:{line}: {op}(" for path, op, line in _calls()
                        if (path, op) not in REVIEWED)
    assert not unreviewed, (
        "calls whose bad indices are device-side asserts on CUDA (the whole process's "
        "device context is lost): make sure the indices are in range, then list each in "
        f"REVIEWED with why: {unreviewed}")


def test_the_reviewed_list_has_no_stale_lines():
    present = {(path, op) for path, op, _ in _calls()}
    assert set(REVIEWED) <= present, sorted(set(REVIEWED) - present)


def test_the_scan_finds_such_a_call():
    """The scan is not vacuous: the old kernel_error scenario's call is found."""
    assert _CALL.search("            return torch.index_select(y, 0, index)")
    assert not _CALL.search("            return op(y)")


def test_the_kernel_error_scenario_raises_on_the_host():
    """The scenario's error is a Python exception from a host-side kernel: raised at the
    call, on every device, and the op traces without running it (its fake kernel)."""
    op = bodies.raising_kernel()
    x = torch.ones(8, 8)
    with pytest.raises(bodies.KernelError, match="raised by the kernel"):
        op(x)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert op(torch.ones(8, 8)).shape == (8, 8)
