"""Shared set-up of the project's own tests."""

import functools
import os
import subprocess

import pytest
from _pytest import pytester as _pytester

from tests import children

#: the helpers the tests of the check families share (planted bugs, assertions of the catch)
pytest.register_assert_rewrite("tests.mutants")

#: torch, the modules it imports lazily and keys caches on (sympy, mpmath), and Triton
#: (a CUDA build's inductor imports it): its extension registers submodules
#: (triton._C.libtriton.linear_layout) that a second import cannot make again
KEPT_MODULES = ("torch", "sympy", "mpmath", "triton")


def _is_torch_module(name: str) -> bool:
    return any(name == top or name.startswith(top + ".") for top in KEPT_MODULES)


@pytest.fixture(autouse=True)
def _keep_torch_modules_across_inline_runs(monkeypatch):
    """pytester's in-process runs drop the modules a run imported; torch modules imported
    again re-register their operator libraries, which torch refuses. Keep them."""
    original = _pytester.SysModulesSnapshot.__init__

    def init(self, preserve=None):
        original(self, lambda name: _is_torch_module(name) or bool(preserve and preserve(name)))

    monkeypatch.setattr(_pytester.SysModulesSnapshot, "__init__", init)


@pytest.fixture(autouse=True)
def _fork_pytesters_children(monkeypatch):
    """pytester's ``runpytest_subprocess`` children, forked where that is the same as a
    fresh process (tests/children.py); its own Popen otherwise."""
    original = _pytester.Pytester.popen

    def popen(self, cmdargs, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
              stdin=_pytester.Pytester.CLOSE_STDIN, **kw):
        if stdin is self.CLOSE_STDIN and not kw and subprocess.PIPE not in (stdout, stderr):
            env = os.environ.copy()  # as pytester's: the test's folder importable
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(),
                                                              env.get("PYTHONPATH", "")]))
            child = children.popen(list(cmdargs), env=env, stdout=stdout, stderr=stderr)
            if child is not None:
                return child
        return original(self, cmdargs, stdout, stderr, stdin, **kw)

    monkeypatch.setattr(_pytester.Pytester, "popen", popen)


@pytest.fixture
def expecttest_installed() -> None:
    """For a test of the OpInfo tier, which imports PyTorch's op_db and so expecttest (a dev
    extra: a machine with the suite alone, a GPU host's image, may lack it): skipped
    without it."""
    pytest.importorskip("expecttest", reason="the OpInfo tier needs expecttest (pip install "
                                             "-e '.[dev]')")


# -- the property checks, as the suite runs them ------------------------------------------


@pytest.fixture
def ci(monkeypatch):
    """The ci profile (derandomized, 25 examples), whatever the run selected; restored
    afterwards: the very settings the suite runs with, so a bug caught here is a bug the
    suite catches."""
    from amp_conformance.checks import profiles

    monkeypatch.setattr(profiles, "_selected", "ci")
    return profiles.selected()


@pytest.fixture
def ci_part(ci):
    """The ci profile for an item of one part of a property (one op of a policy, one rule
    of the region machine): what the suite's per-op and per-rule items run."""
    from amp_conformance.checks import profiles

    return profiles.selected_part()


@pytest.fixture
def ci_generated(ci):
    """The ci profile's generated examples alone (no explicit examples, and no shrinking,
    which these tests do not need): what the generator by itself catches."""
    from hypothesis import Phase, settings

    return settings(ci, phases=[Phase.generate])


@pytest.fixture
def state_restored():
    """The test leaves the autocast state (cpu and cuda) as it found it. Not autouse: the
    tests that plant bugs in autocast ask for it (``pytest.mark.usefixtures``)."""
    from amp_conformance.core.state import AutocastState

    before = {d: AutocastState.capture(d) for d in ("cpu", "cuda")}
    yield
    for device, state in before.items():
        after = AutocastState.capture(device)
        state.restore()
        assert not state.diff(after), f"{device} autocast state leaked: {state.diff(after)}"


# -- devices absent here -----------------------------------------------------------------

#: device types whose autocast policy a CPU build of torch registers and can run through
#: FakeTensorMode, in the order a test that needs "a device absent here" takes them
FAKE_DEVICES = ("cuda", "xpu", "mps", "mtia")


@functools.cache
def fake_tensors_fail(device: str) -> str | None:
    """Why FakeTensorMode cannot make a tensor of ``device`` here, or None when it can.

    Older torch (2.11) makes a real tensor of a fake cuda/xpu device whenever CUDA or XPU
    is available (``init_gpu_context``): a fake xpu tensor on a CUDA machine then raised
    "Torch not compiled with XPU enabled"; ``core/target.py`` skips that call for an absent
    device, and this asks the suite's own context."""
    import torch

    from amp_conformance.core.target import Target

    try:
        with Target(device, fake=True).tensors():  # as the suite makes them
            torch.empty(1, device=device)
    except Exception as exc:  # noqa: BLE001 - the reason is the skip's
        return (f"torch {torch.__version__} cannot make a fake {device} tensor here: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return None


def why_not_absent(device: str) -> str | None:
    """Why ``device`` cannot serve as a device absent here, or None when it can: autocast
    knows it, it is not available on this machine, its policy runs through FakeTensorMode."""
    from amp_conformance.core import devices
    from amp_conformance.core.target import fake_supported

    if not devices.is_autocast_available(device):
        return f"{device}: not an autocast device type of this torch"
    if devices.is_available(device):
        return f"{device}: available here"
    if not fake_supported(device):
        return f"{device}: no Autocast kernels to run through FakeTensorMode"
    return fake_tensors_fail(device)


def absent_device(among: tuple[str, ...] = FAKE_DEVICES) -> str | None:
    """The first device type of ``among`` absent here (:func:`why_not_absent`), or None.
    CUDA is the absent device on a CPU machine, not on a GPU host."""
    return next((d for d in among if why_not_absent(d) is None), None)


@pytest.fixture(name="absent_device")
def _absent_device(request) -> str:
    """A device type absent here (:func:`absent_device`), of ``request.param`` (a tuple,
    with ``indirect=True``) or any; skips the test, saying why, where there is none."""
    among = getattr(request, "param", FAKE_DEVICES)
    device = absent_device(among)
    if device is None:
        pytest.skip(f"needs {' or '.join(among)} absent here, with fake tensors of it: "
                    f"{'; '.join(why_not_absent(d) for d in among)}")
    return device


@pytest.fixture(name="fake_device")
def _fake_device(request) -> str:
    """``request.param`` (``indirect=True``), a device type whose fake tensors can be made
    here; skips the test, saying why, where they cannot."""
    why = fake_tensors_fail(request.param)
    if why is not None:
        pytest.skip(f"needs fake {request.param} tensors: {why}")
    return request.param
