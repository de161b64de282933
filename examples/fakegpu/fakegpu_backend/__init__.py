"""fakegpu: an example vendor backend for amp-conformance, written in Python.

Importing the package makes ``fakegpu`` a device of the process (a PrivateUse1 backend
whose memory is host memory, see ``device.py``) and registers its autocast policy under
``AutocastPrivateUse1`` (see ``autocast.py``). ``pytest --backend-module fakegpu_backend``
imports it before the suite is collected.

``FAKEGPU_DROP_AUTOCAST=mm,cat`` leaves the named ops out of the autocast policy (a
broken backend, for the suite's own tests).
"""

import os

from . import autocast, device

device.register()
autocast.register(drop=[n for n in os.environ.get("FAKEGPU_DROP_AUTOCAST", "").split(",") if n])

NAME = device.NAME
