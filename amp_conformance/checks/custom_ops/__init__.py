"""A custom op's autocast rule on the device under test: how a vendor's users give their own
ops a policy. Four routes register one (``torch.library.register_autocast`` on a
``torch.library.custom_op``, ``CustomOpDef.register_autocast``, ``register_autocast`` on an
op defined with ``torch.library.Library`` as a C++ ``TORCH_LIBRARY`` op is, and an
``Autocast<Device>`` kernel registered with ``Library.impl``), each held to its declared cast:
the dtypes the op receives and returns, its values against the hand-cast control, its
gradients. A torch that refuses the registration for the device fails, quoting the refusal."""

from amp_conformance.core.registry import Check

CHECKS = (
    Check("custom_ops", "a custom op given an autocast rule for the device (register_autocast, "
          "CustomOpDef.register_autocast, an Autocast<Device> kernel through torch.library) "
          "receives and returns the declared cast's dtypes, equals the hand-cast control and "
          "backpropagates; a refused registration fails quoting torch's message"),
)
