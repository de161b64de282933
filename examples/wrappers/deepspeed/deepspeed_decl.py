"""DeepSpeed's autocast wrappers (``DS_BUILD_OPS=0 DS_ACCELERATOR=cpu pip install deepspeed``).

What they claim, from deepspeed 0.19.8 (paths relative to ``site-packages/deepspeed/``), run
with ``DS_ACCELERATOR=cpu`` (set below before deepspeed is imported), so DeepSpeed's
accelerator, and the device of every region it enters, is ``cpu``:

- ``deepspeed.runtime.torch_autocast.autocast_if_enabled(engine)`` (runtime/torch_autocast.py:
  93-137), the context manager the engine's forward runs the model in (runtime/engine.py:3006:
  ``with deepcompile_z3_forward_context(self) as z3_eager_fallback, autocast_if_enabled(self):``).
  Its docstring (torch_autocast.py:95-100): "Context manager for DeepSpeed autocast with
  conditional support. This function manages `torch.autocast` contexts under DeepSpeed,
  allowing autocast to be enabled or disabled dynamically based on runtime conditions. It
  ensures consistency when autocast is already active outside of DeepSpeed, or when it is
  configured within the DeepSpeed engine." Its code says what that means:

  * with the engine's ``torch_autocast`` section enabled, ``torch.autocast(device_type=
    get_accelerator().device_name(), dtype=engine.torch_autocast_dtype(), enabled=True)``,
    whether or not a region is open outside (torch_autocast.py:108-118, 131-135; the log line
    at :111-113: "torch.autocast is already enabled outside DeepSpeed. Switching to the
    configuration defined in `torch_autocast` section of DeepSpeed config."). The section's
    format (runtime/constants.py:175-185) is ``"torch_autocast": {"enabled": true, "dtype":
    "bfloat16", ...}``; ``dtype`` is parsed by ``DtypeEnum`` (runtime/config.py:144-149:
    ``"float16"``/``"fp16"``/``"half"``, ``"bfloat16"``/``"bf16"``, ...), and a dtype it
    does not know is refused: "Invalid dtype for torch autocast" (runtime/config.py:186-193;
    the ``ValueError`` actually comes from ``DtypeEnum`` itself, the same exception class).
    Declared here as the region factory ``deepspeed.runtime.torch_autocast.autocast_if_enabled``:
    a precision name is the section's ``dtype`` (``bfloat16``, ``float16``); ``disabled`` is the
    section with ``"enabled": false`` (the default, constants.py:188-189), where, outside any
    region, it only yields (torch_autocast.py:136-137): autocast stays off. An unknown name
    raises (the engine is not built). The region is a ``@contextmanager`` generator
    (torch_autocast.py:93), so one region object is entered once.
  * with ``torch_autocast`` disabled and a user's autocast region open outside, the engine
    leaves that region: ``torch.autocast(device_type=get_accelerator().device_name(),
    enabled=False)`` (torch_autocast.py:119-129), with the warning (:123) "torch.autocast is
    enabled outside DeepSpeed but disabled within the DeepSpeed engine. If you are using
    DeepSpeed's built-in mixed precision, the engine will follow the settings in bf16/fp16
    section." Declared as the float32 island
    ``deepspeed.autocast_if_enabled.torch_autocast_disabled`` (a context manager: inside any
    autocast region, the engine's forward computes in float32). It departs on CPU: whether a
    region is open is asked with ``torch.is_autocast_enabled()`` without a device
    (torch_autocast.py:107), which is CUDA's flag, so a CPU region is left open inside the
    engine unless CUDA's flag happens to be set (xfail.txt; defects/
    autocast_if_enabled_reads_cuda_flag.py).

- ``deepspeed.runtime.zero.linear.autocast_custom_fwd`` / ``autocast_custom_bwd``
  (runtime/zero/linear.py:46-57): ``functools.partial(torch.amp.custom_fwd,
  device_type=get_accelerator().device_name())`` and the same of ``torch.amp.custom_bwd``
  (linear.py:51-53), so ``torch.amp.custom_fwd``'s contract on the accelerator's device.
  Declared with ``cast_inputs=torch.float32`` (floating inputs cast to float32 and autocast off
  inside an enabled CPU region; backward in the forward's autocast state).

The engine is real: ``deepspeed.initialize`` on a tiny ``torch.nn.Linear`` with an SGD
optimizer and ``{"train_batch_size": 1, "torch_autocast": {...}}``, in a single-process gloo
group (``deepspeed.init_distributed(dist_backend="gloo")`` with RANK=0, WORLD_SIZE=1 and a
free local MASTER_PORT, unless the environment sets them). One engine per precision name,
built on the first ``make`` of that name and kept (an engine takes about a second). The first
``init_distributed`` on a machine JIT-builds DeepSpeed's ``deepspeed_shm_comm_op`` into
``~/.cache/torch_extensions`` (about 40 s once; later runs reuse it).
"""

from __future__ import annotations

import os

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import importlib.metadata  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402

import torch  # noqa: E402
from deepspeed.runtime.torch_autocast import autocast_if_enabled  # noqa: E402
from deepspeed.runtime.zero.linear import autocast_custom_bwd, autocast_custom_fwd  # noqa: E402

from amp_conformance.checks.wrappers.declare import (  # noqa: E402
    ERROR,
    NOOP,
    Float32Island,
    ForwardDecorator,
    RegionFactory,
)

VERSION = importlib.metadata.version("deepspeed")
#: the torch_autocast section's dtype values (runtime/config.py:146, 149)
PRECISIONS = {"bfloat16": torch.bfloat16, "float16": torch.float16}
#: the name of the engine whose torch_autocast section is off (constants.py:188-189)
DISABLED = "disabled"

_lock = threading.Lock()
_engines: dict[str, object] = {}


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _init_distributed() -> None:
    import deepspeed

    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = _free_port()
    deepspeed.init_distributed(dist_backend="gloo")


def section(precision: str) -> dict:
    """The engine's ``torch_autocast`` config section for a precision name."""
    if precision == DISABLED:
        return {"enabled": False}
    return {"enabled": True, "dtype": precision}


def engine(precision: str):
    """A real DeepSpeed engine (tiny Linear, SGD) with ``torch_autocast`` from ``precision``;
    built once per name (an unknown dtype raises from ``deepspeed.initialize``, each time)."""
    import deepspeed

    with _lock:
        if precision not in _engines:
            _init_distributed()
            model = torch.nn.Linear(4, 4)
            built, *_ = deepspeed.initialize(
                model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                config={"train_batch_size": 1, "torch_autocast": section(precision)})
            _engines[precision] = built
        return _engines[precision]


def engine_autocast(precision: str, device_type: str):
    """What the engine's forward enters (engine.py:3006): ``autocast_if_enabled(engine)``."""
    return autocast_if_enabled(engine(precision))


WRAPPERS = [
    RegionFactory(
        name="deepspeed.runtime.torch_autocast.autocast_if_enabled",
        make=engine_autocast,
        devices=("cpu",),  # get_accelerator().device_name() with DS_ACCELERATOR=cpu
        precisions=PRECISIONS,  # torch_autocast.py:131-135, config.py:186-193
        float32_names=(DISABLED,),
        float32=NOOP,  # torch_autocast.py:136-137: it only yields
        unknown=ERROR,  # config.py:186-193: "Invalid dtype for torch autocast"
        decorator=False,  # not documented as a decorator
        single_use="a @contextmanager generator (runtime/torch_autocast.py:93)",
        library="deepspeed",
        version=VERSION,
    ),
    Float32Island(
        name="deepspeed.autocast_if_enabled.torch_autocast_disabled",
        devices=("cpu",),
        # torch_autocast.py:119-129: autocast disabled within the engine when its
        # torch_autocast section is off and a region is open outside
        context=lambda device: engine_autocast(DISABLED, device),
        returns="float32",
        library="deepspeed",
        version=VERSION,
    ),
    ForwardDecorator(
        name="deepspeed.runtime.zero.linear.autocast_custom_fwd",
        # linear.py:51-53: partial(torch.amp.custom_fwd, device_type=<accelerator>)
        decorate=lambda fn: autocast_custom_fwd(cast_inputs=torch.float32)(fn),
        cast_dtype=torch.float32,
        casts_on=("cpu",),
        devices=("cpu",),
        disables_autocast=True,  # torch.amp.custom_fwd with cast_inputs
        decorate_backward=autocast_custom_bwd,  # linear.py:52-53
        library="deepspeed",
        version=VERSION,
    ),
]
