"""The custom op the custom_ops checks give an autocast rule, and the routes that register one.

The op is ``mm`` of its first two tensors (the second converted to the first's dtype, so a
call that casts nothing still runs) beside three tensors autocast must leave alone: a
float64 one, an integer one and, off cpu, a cpu one. Every kernel of it records the dtypes
it received (:data:`SEEN`); its gradient is written by hand (``register_autograd``).

Registered kernels are global state: each item defines its ops in the process's own
namespace (:func:`namespace`) inside :func:`registered`, which keeps every
``torch.library.Library`` involved alive for the item and destroys them all when it ends,
the definitions with them, so nothing of one item is left for the next.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from amp_conformance.core import devices
from amp_conformance.core.casting import hand_cast
from amp_conformance.schema.versions import release

#: the op's arguments: the two it multiplies, then a float64, an integer and an optional
#: tensor of another device
SCHEMA = "(Tensor a, Tensor b, Tensor d, Tensor i, Tensor? o) -> Tensor"

#: the dtypes each call of a kernel of the op received, (a, b, d, i, o), o None where absent
SEEN: list[tuple[torch.dtype | None, ...]] = []


def namespace() -> str:
    """The process's own op namespace (a forked child gets one of its own)."""
    return f"amp_conformance_ops_{os.getpid()}"


def dtypes_of(*tensors: torch.Tensor | None) -> tuple[torch.dtype | None, ...]:
    """What :data:`SEEN` records of a call: each argument's dtype, None for an absent one."""
    return tuple(None if t is None else t.dtype for t in tensors)


def _impl(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, i: torch.Tensor,
          o: torch.Tensor | None) -> torch.Tensor:
    SEEN.append(dtypes_of(a, b, d, i, o))
    return torch.mm(a, b.to(a.dtype))


def _fake(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, i: torch.Tensor,
          o: torch.Tensor | None) -> torch.Tensor:
    SEEN.append(dtypes_of(a, b, d, i, o))
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001 - torch.library's signature
    ctx.save_for_backward(inputs[0], inputs[1])


def _backward(ctx, grad):  # noqa: ANN001, ANN202 - torch.library's signature
    a, b = ctx.saved_tensors
    # the transposes made contiguous: a bfloat16 matmul with a transposed second operand
    # takes milliseconds on some CPUs
    return (torch.mm(grad, b.to(a.dtype).T.contiguous()), torch.mm(a.T.contiguous(), grad)
            .to(b.dtype), None, None, None)


# -- the routes --------------------------------------------------------------------------

Op = Callable[..., torch.Tensor]


class Refused(Exception):
    """torch raised registering the rule; ``__cause__`` is what it raised."""


class Unavailable(Exception):
    """torch refused the route on a release before the one that brought its API to the
    device type: not applicable, shown by the refusal itself (quoted)."""


def _custom_op(stack: contextlib.ExitStack, qualname: str) -> torch.library.CustomOpDef:
    """``qualname`` defined with ``torch.library.custom_op``, undefined when ``stack`` closes
    (the custom op's own library, which holds every registration made through it)."""
    from torch._library import custom_ops

    def undefine() -> None:
        library = custom_ops.OPDEF_TO_LIB.pop(qualname, None)
        if library is not None:
            library._destroy()
        custom_ops.OPDEFS.pop(qualname, None)

    stack.callback(undefine)
    op = torch.library.custom_op(qualname, _impl, mutates_args=(), schema=SCHEMA)
    op.register_fake(_fake)
    op.register_autograd(_backward, setup_context=_setup)
    return op


def _library_op(stack: contextlib.ExitStack, qualname: str) -> tuple[torch.library.Library, Op]:
    """``qualname`` defined in a ``torch.library.Library`` of the item's own (as a C++
    ``TORCH_LIBRARY`` op is), with its kernel, fake kernel and gradient; destroyed when
    ``stack`` closes."""
    namespace_, name = qualname.split("::")
    library = torch.library.Library(namespace_, "FRAGMENT")
    stack.callback(library._destroy)
    library.define(name + SCHEMA)
    library.impl(name, _impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, _fake, lib=library)
    torch.library.register_autograd(qualname, _backward, setup_context=_setup, lib=library)
    return library, _overload(qualname)


def _overload(qualname: str) -> torch._ops.OpOverload:
    namespace_, name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace_), name).default


def _by_function(stack: contextlib.ExitStack, qualname: str, device: str,
                 dtype: torch.dtype) -> Op:
    op = _custom_op(stack, qualname)
    _refusal(lambda: torch.library.register_autocast(op, device, dtype))
    return op


def _by_method(stack: contextlib.ExitStack, qualname: str, device: str,
               dtype: torch.dtype) -> Op:
    op = _custom_op(stack, qualname)
    _refusal(lambda: op.register_autocast(device, dtype))
    return op


def _on_library_op(stack: contextlib.ExitStack, qualname: str, device: str,
                   dtype: torch.dtype) -> Op:
    library, op = _library_op(stack, qualname)
    _refusal(lambda: torch.library.register_autocast(qualname, device, dtype, lib=library))
    return op


def _by_kernel(stack: contextlib.ExitStack, qualname: str, device: str,
               dtype: torch.dtype) -> Op:
    """A kernel of the suite's own at ``Autocast<Device>``, as a backend registers its
    policy: eligible tensors cast, the op called below the key."""
    op = _custom_op(stack, qualname)
    key = devices.dispatch_key(device)
    named = getattr(torch._C.DispatchKey, key, None)  # AutocastXLA has no Python name

    overload = _overload(qualname)

    def kernel(*args: torch.Tensor | None) -> torch.Tensor:
        with (torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(named)) if named
              is not None else torch._C._DisableAutocast()):
            return overload(*hand_cast(args, dtype, device))

    library = torch.library.Library(qualname.split("::")[0], "IMPL")
    stack.callback(library._destroy)
    _refusal(lambda: library.impl(qualname.split("::")[1], kernel, key))
    return op


def _refusal(register: Callable[[], object]) -> None:
    try:
        register()
    except Exception as exc:  # the check quotes it
        raise Refused() from exc


#: register_autocast came in torch 2.7 for cpu and cuda (pytorch#145588), and took every
#: device type torch.autocast supports in 2.13 (pytorch#183689; 2.12.1 still refuses xpu)
REGISTER_AUTOCAST = {"cpu": "2.7", "cuda": "2.7", None: "2.13"}


@dataclass(frozen=True)
class Route:
    """One way to give the op a rule: ``name`` (the item's id), ``how`` (the call, for
    messages), ``register(stack, qualname, device, dtype)`` -> the op to call, and the first
    release with its API per device type (``since``; None: every other device)."""

    name: str
    how: str
    register: Callable[[contextlib.ExitStack, str, str, torch.dtype], Op]
    since: dict[str | None, str] | None = None

    def version_gap(self, device: str, version: str | None = None) -> str | None:
        """Why the running torch (or ``version``) has no such route for ``device``, or None."""
        if self.since is None:
            return None
        first = self.since.get(device, self.since[None])
        if release(version) < first:
            return (f"not applicable: {self.how.split('(')[0]} takes device type {device!r} "
                    f"from torch {first} on (pytorch#145588, #183689), this is "
                    f"{release(version)}")
        return None


ROUTES: tuple[Route, ...] = (
    Route("register_autocast", "torch.library.register_autocast(op, device, cast) on a "
          "torch.library.custom_op", _by_function, since=REGISTER_AUTOCAST),
    Route("CustomOpDef.register_autocast", "op.register_autocast(device, cast) on a "
          "torch.library.custom_op", _by_method, since=REGISTER_AUTOCAST),
    Route("register_autocast.library_op", "torch.library.register_autocast(qualname, device, "
          "cast, lib=...) on an op defined with torch.library.Library", _on_library_op,
          since=REGISTER_AUTOCAST),
    Route("Library.impl", "an Autocast<Device> kernel registered with "
          "torch.library.Library.impl on a torch.library.custom_op", _by_kernel),
)


def by_name(name: str) -> Route:
    (found,) = [r for r in ROUTES if r.name == name]
    return found


@contextlib.contextmanager
def registered(route: Route, device: str, casts: dict[str, torch.dtype]) -> Iterator[dict[str, Op]]:
    """One op per declared cast (label -> cast dtype), each given its rule for ``device``
    by ``route``; all of it removed on exit, also when registering raised (:class:`Refused`)."""
    with contextlib.ExitStack() as stack:
        ops = {label: route.register(stack, f"{namespace()}::mm_{label}", device, dtype)
               for label, dtype in casts.items()}
        SEEN.clear()
        try:
            yield ops
        finally:
            SEEN.clear()
