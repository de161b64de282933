"""The operator surface (opt-in: ``--amp-opinfo``; logic in amp_conformance.checks.opinfo).

``test_opinfo``: every sample form of one OpInfo of the running release's op_db, under
the device's autocast, against the reference autocast of the device's op lists.
"""

import pytest

from amp_conformance.checks.opinfo import check


@pytest.mark.amp_check("opinfo")
def test_opinfo(opinfo_case, record_property):
    """Autocast never turns a working call into an error; a call entering policy kernels
    gives the declared policy's dtypes and values; a call entering none is left alone."""
    try:
        check.check(opinfo_case, record_property)
    except check.NotApplicable as exc:
        pytest.skip(str(exc))
