"""The mutation catalogue: every mutant, gathered from its family's module.

Each check family's mutants live in ``mutants_<family>.py`` beside this module (the family
whose checks must kill them); the machinery they share (:class:`Mutant`, :func:`register`,
the kernel and patch helpers) is :mod:`amp_conformance.tools.selftest.mutation`. Importing
this module imports every family of :data:`FAMILIES`, so :data:`CATALOGUE` is complete; its
names are re-exported here for the runner, the plugin and older imports.

A new family adds ``mutants_<family>.py`` (importing from ``mutation``, never from here) and
its name in :data:`FAMILIES`.
"""

from __future__ import annotations

import importlib

from amp_conformance.tools.selftest.mutation import *  # noqa: F403 - the catalogue's public names
from amp_conformance.tools.selftest.mutation import (  # noqa: F401 - named for importers
    _AUTOCAST,
    CATALOGUE,
    Mutant,
    Undo,
    register,
)

#: the check families with mutants, each a module ``mutants_<family>.py`` registering on import
FAMILIES = ("policy", "regions", "cast_cache", "errors", "legacy", "custom_fwd", "gradscaler",
            "compile", "training", "backward", "eligibility", "numerics", "defects", "wrappers",
            "opinfo")
for _family in FAMILIES:
    importlib.import_module(f"amp_conformance.tools.selftest.mutants_{_family}")
