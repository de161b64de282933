"""fakegpu: an example vendor backend for amp-conformance, written in Python.

Importing the package makes ``fakegpu`` a device of the process (a PrivateUse1 backend
whose memory is host memory, see ``device.py``) and registers its autocast policy under
``AutocastPrivateUse1`` (see ``autocast.py``). ``pytest --backend-module fakegpu_backend``
imports it before the suite is collected.

``FAKEGPU_DROP_AUTOCAST=mm,cat`` leaves the named ops out of the autocast policy, and
``FAKEGPU_NO_KERNEL=mm,isfinite`` gives the device no kernel for the named ops (a broken or
partial backend, for the suite's own tests).
"""

import os

from . import autocast, device


def _names(variable: str) -> list[str]:
    return [n for n in os.environ.get(variable, "").split(",") if n]


device.register(lacking=tuple(_names("FAKEGPU_NO_KERNEL")))
autocast.register(drop=_names("FAKEGPU_DROP_AUTOCAST"))

NAME = device.NAME
