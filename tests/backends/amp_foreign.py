"""A backend module whose autocast registrations include kernels the suite cannot call.

Real backends do this: a vendor registers Autocast kernels for the ops of its own
libraries, some of which may not be loaded in the process that runs the suite. Imported
with ``--backend-module amp_foreign``, it adds to AutocastCPU:

- ``amp_ghostlib::ghost_op``: a kernel for an op no library defines (its namespace was
  never loaded: no schema, ``torch.ops`` cannot resolve it);
- ``aten::mm.amp_no_such_overload``: a kernel for an overload aten does not have;
- ``amp_foreignlib::scale``: a library op with a schema and an autocast kernel (lower
  precision), which no op list names.

The CPU policy itself is untouched, so every item must run as without this module.
"""

from __future__ import annotations

import torch

_LIBRARIES: list[torch.library.Library] = []


def _lower(x: torch.Tensor) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
        return torch.ops.amp_foreignlib.scale(x.to(torch.get_autocast_dtype("cpu")))


def _register() -> None:
    ghost = torch.library.Library("amp_ghostlib", "IMPL")
    ghost.impl("ghost_op", lambda *args: args[0], "AutocastCPU")
    bogus = torch.library.Library("aten", "IMPL")
    bogus.impl("mm.amp_no_such_overload", lambda *args: args[0], "AutocastCPU")
    lib = torch.library.Library("amp_foreignlib", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    lib.impl("scale", lambda x: x * 2, "CompositeExplicitAutograd")
    lib.impl("scale", _lower, "AutocastCPU")
    _LIBRARIES.extend((ghost, bogus, lib))


_register()
