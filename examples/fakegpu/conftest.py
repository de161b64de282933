"""fakegpu's hooks into the amp-conformance suite (see docs/vendor-guide.md).

This is the root conftest of the run, so pytest loads it before the suite's settings are
resolved; a conftest deeper in the tree would be too late for these hooks.
"""

from pathlib import Path

from amp_conformance.checks.call_forms import Lit

HERE = Path(__file__).resolve().parent


def pytest_amp_conformance_oplists(config, device):
    """fakegpu's own op list: its policy, independent of where pytest is started."""
    if device == "fakegpu":
        return [HERE / "fakegpu.toml"]
    return None


def pytest_amp_conformance_property_forms(config, device):
    """How the policy properties call fakegpu's ops that the suite's table (FORMS) lacks:
    layer_norm (fp32 in fakegpu.toml) on an (m, n) input normalised over its last dim."""
    if device == "fakegpu":
        return {"layer_norm": lambda s: ((s.m, s.n), Lit([s.n]))}
    return None
