"""The operator surface under autocast (opt-in: ``--amp-opinfo``): every OpInfo sample.

The op lists prove each overload of a policy on one call; this tier draws the calls from
PyTorch's own OpInfo database (``op_db``) of the running release, every sample in every
argument form it has, and holds each to the policy:

- ``source``: op_db, imported once and only when the tier is on; the OpInfos a device can
  run; their samples, drawn with a fixed seed, moved onto the device where needed.
- ``forms``: a sample's argument forms (ranks, broadcasting, 0-dim and empty operands,
  scalars, keywords and their values, layout, dtypes), and the fewest samples that show
  every form of an op (the default draw).
- ``calls``: the calls judged: the chosen samples in float32 and amp-dtype builds, each
  with its non-contiguous twin, and the method, in-place and ``out=`` variants; each run on
  its own copy of the sample; a reproduction that runs as pasted.
- ``checks/reference.py`` (shared with the modules family): the reference autocast. The
  device's op lists say each policy overload's cast (observed once: which overload each
  entry enters); a Python kernel above every Autocast key casts exactly there, with
  autocast off. The same call through it is the hand-cast control, for a policy op, a
  composite that reaches policy ops, and an op that reaches none (then it casts nothing:
  the control is eager).
- ``judge``: one sample form, run under the device's autocast (observed) and through the
  reference; what it was (policy op, composite, left alone) and how it ended (agrees,
  capability, reference defect, not applicable, failed).
- ``check``: one item per (amp dtype, op): every sample form judged, every failure named
  with a reproduction, the summary recorded for the report's operator-surface table.
- ``collect``: the opt-in gate and the items' parametrization.
"""

from amp_conformance.core.registry import Check  # noqa: E402 - the declaration follows the docs

CHECKS = (
    Check("opinfo", "opt-in (--amp-opinfo): every sample form of every OpInfo of the running "
          "release's op_db: no new errors inside autocast, the declared policy's dtypes and "
          "values where a call enters policy kernels, eager's where none",
          opt_in="--amp-opinfo"),
)

from amp_conformance.checks.opinfo.tier import PARAMS, TIER  # noqa: E402,F401
