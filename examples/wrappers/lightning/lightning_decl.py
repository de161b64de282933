"""Lightning's autocast wrappers (``pip install lightning``).

What they claim, from lightning 2.6.6:

- ``lightning.pytorch.plugins.precision.MixedPrecision(precision, device)``
  (lightning/pytorch/plugins/precision/amp.py:30-123): "Automatic Mixed Precision (AMP)
  training with ``torch.autocast``"; ``precision`` is ``'16-mixed'`` (float16) or
  ``'bf16-mixed'`` (bfloat16), anything else raises ValueError (amp.py:46-50); ``device`` is
  "the device for ``torch.autocast``" (amp.py:35). ``autocast_context_manager()`` returns
  ``torch.autocast(device, dtype=..., cache_enabled=False)`` (amp.py:114-116) and
  ``forward_context()`` enters it (amp.py:118-123). With the cast cache off there is nothing
  to clear at exit, so ``clears_cache`` keeps autocast's default.
- ``lightning.fabric.plugins.precision.MixedPrecision`` (lightning/fabric/plugins/precision/
  amp.py:40-64): the same names; ``forward_context()`` is ``torch.autocast(device,
  dtype=...)`` with the cache on (amp.py:63-64).
- What a user writes, ``Trainer(accelerator="cpu", precision=...)``: the trainer picks the
  plugin (lightning/pytorch/trainer/connectors/accelerator_connector.py); ``"32-true"`` is
  the plain ``Precision`` plugin (forward_context a no-op), an unknown name raises, and
  ``"16-mixed"`` on CPU is documented by a warning to become ``"bf16-mixed"``
  (accelerator_connector.py:478-483): so on CPU both mixed names claim bfloat16.

None of them documents use as a function decorator (``decorator=False``).

Single use. lightning.pytorch's ``forward_context`` is a generator-based context manager
(``@contextmanager``, lightning/pytorch/plugins/precision/amp.py:119-123): the object it
returns can be entered once, as Python's ``contextlib`` documents, so a second entry raises
(``single_use``); ``autocast_context_manager()`` and Fabric's ``forward_context()`` return a
``torch.autocast``, which can be entered again.
"""

from __future__ import annotations

import importlib.metadata
import logging
import warnings

import torch
from lightning.fabric.plugins.precision import MixedPrecision as FabricMixedPrecision
from lightning.pytorch.plugins.precision import MixedPrecision

from amp_conformance.checks.wrappers.declare import ERROR, NOOP, RegionFactory

VERSION = importlib.metadata.version("lightning")
PRECISIONS = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def autocast_context_manager(precision: str, device_type: str):
    return MixedPrecision(precision=precision, device=device_type).autocast_context_manager()


def forward_context(precision: str, device_type: str):
    return MixedPrecision(precision=precision, device=device_type).forward_context()


def fabric_forward_context(precision: str, device_type: str):
    return FabricMixedPrecision(precision=precision, device=device_type).forward_context()


def trainer_forward_context(precision: str, device_type: str):
    """The plugin ``Trainer(accelerator=device_type, precision=precision)`` picks."""
    from lightning.pytorch import Trainer

    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # its banner per Trainer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "GPU available but not used", the 16-mixed fallback
        trainer = Trainer(accelerator=device_type, devices=1, precision=precision, logger=False,
                          enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False)
    return trainer.precision_plugin.forward_context()


#: lightning/pytorch/plugins/precision/amp.py:119-123 (see the module docstring)
GENERATOR = "a @contextmanager generator (lightning/pytorch/plugins/precision/amp.py:119-123)"


def _plugin(name: str, make, single_use: str = "") -> RegionFactory:
    return RegionFactory(name=name, make=make, devices=("cpu", "cuda"), precisions=PRECISIONS,
                         float32_names=(),  # the plugin takes no float32 name at all
                         unknown=ERROR,  # amp.py:46-50 (both packages): ValueError
                         decorator=False, single_use=single_use, library="lightning",
                         version=VERSION)


WRAPPERS = [
    _plugin("lightning.pytorch.MixedPrecision.autocast_context_manager",
            autocast_context_manager),
    _plugin("lightning.pytorch.MixedPrecision.forward_context", forward_context, GENERATOR),
    _plugin("lightning.fabric.MixedPrecision.forward_context", fabric_forward_context),
    RegionFactory(
        name="lightning.Trainer.precision_plugin.forward_context",
        make=trainer_forward_context,
        devices=("cpu",),  # on CUDA "16-mixed" means float16: a declaration of its own
        precisions={"bf16-mixed": torch.bfloat16,
                    "16-mixed": torch.bfloat16},  # accelerator_connector.py:478-483
        float32_names=("32-true",),
        float32=NOOP,
        unknown=ERROR,
        decorator=False,
        single_use=GENERATOR,  # the plugin is lightning.pytorch's MixedPrecision
        library="lightning",
        version=VERSION,
    ),
]
