"""torch.nn modules under autocast (logic in amp_conformance.checks.modules).

``test_modules``: each module of ``oplists/modules.toml`` in every mode, inside the
device's autocast, against its computation through the reference autocast.
``test_modules_db``: opt-in (``--amp-modules``), a ModuleInfo of module_db, its first inputs.
"""

import pytest

from amp_conformance.checks.modules import check
from amp_conformance.core.errors import NotApplicable


def _check(case, record_property):
    try:
        check.check(case, record_property)
    except NotApplicable as exc:
        pytest.skip(str(exc))


@pytest.mark.amp_check("modules")
def test_modules(module_case, record_property):
    """Outputs and gradients of the module inside autocast have its computation's dtypes and
    values, cast where the op lists say, whatever path it takes."""
    _check(module_case, record_property)


@pytest.mark.amp_check("modules_db")
def test_modules_db(module_db_case, record_property):
    """The same for the inputs module_db makes of a ModuleInfo."""
    _check(module_db_case, record_property)
