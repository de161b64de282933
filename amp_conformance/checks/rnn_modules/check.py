"""RNN modules under autocast: a small declarative matrix of LSTM, GRU and RNN_TANH modules.

Each row is one module configuration; per device, the dtype its outputs (output, h_n, c_n)
must have under autocast is recorded below with the reason, and backward must give every
float32 parameter a float32 gradient. Plus CPU's case of lower-precision weights with a
float32 input (upstream ``test_autocast_rnn``): it fails outside autocast and runs inside.

On cpu, ``torch.lstm`` with float32 inputs takes the oneDNN path (``aten::mkldnn_rnn_layer``,
lower precision under autocast). CPUs without the oneDNN LSTM primitive for an amp dtype
(bfloat16 on AVX2-only CPUs; float16 without AVX512-FP16/AMX) raise "could not create a
primitive descriptor for the LSTM forward propagation primitive" there: such rows are
reported skipped with that reason, decided by trying the op once on the running machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from amp_conformance.core import hardware
from amp_conformance.core.errors import ConformanceFailure, NotApplicable
from amp_conformance.core.target import Target, fake_runtime
from amp_conformance.schema import messages

AMP, FP32 = "amp", "float32"
_IN, _HIDDEN, _SEQ, _LENGTHS = 4, 3, 5, (5, 3)
NO_PRIMITIVE = hardware.NO_LSTM_PRIMITIVE


@dataclass(frozen=True)
class RnnRow:
    """One module configuration of the matrix; ``id`` is its test id."""

    id: str
    mode: str  # LSTM, GRU or RNN_TANH
    layers: int = 1
    bidirectional: bool = False
    batch_first: bool = False
    packed: bool = False
    #: False: every parameter re-allocated after construction, so the weights are not the
    #: views of one flat buffer the module made (cuDNN's "not contiguous" path)
    preflattened: bool = True

    def describe(self) -> str:
        parts = [self.mode, f"{self.layers} layer{'s' if self.layers > 1 else ''}"]
        parts += [name for name, on in (("bidirectional", self.bidirectional),
                                        ("batch_first", self.batch_first),
                                        ("packed", self.packed),
                                        ("not preflattened", not self.preflattened)) if on]
        return ", ".join(parts)


ROWS: tuple[RnnRow, ...] = (
    RnnRow("lstm", "LSTM"),
    RnnRow("lstm-2layers-bidirectional", "LSTM", layers=2, bidirectional=True),
    RnnRow("lstm-batch_first-packed", "LSTM", batch_first=True, packed=True),
    RnnRow("lstm-2layers-bidirectional-packed", "LSTM", layers=2, bidirectional=True, packed=True),
    RnnRow("lstm-not_preflattened", "LSTM", preflattened=False),
    RnnRow("gru", "GRU"),
    RnnRow("gru-2layers-bidirectional-batch_first", "GRU", layers=2, bidirectional=True,
           batch_first=True),
    RnnRow("gru-packed-not_preflattened", "GRU", packed=True, preflattened=False),
    RnnRow("rnn_tanh", "RNN_TANH"),
    RnnRow("rnn_tanh-2layers-bidirectional-batch_first-packed", "RNN_TANH", layers=2,
           bidirectional=True, batch_first=True, packed=True),
)


#: PyTorch's cuDNN RNN autocast kernel casts to float16 whatever the autocast dtype
#: (oplists/defects.toml; the op-list entry lstm-_cudnn_rnn-bfloat16 meets it too)
CUDNN_BF16_DEFECT = "cudnn-rnn-float16-under-bfloat16"


def every_output(dtype: torch.dtype) -> str:
    """How a failure says that all outputs share one wrong dtype (the defect's symptom)."""
    return f"(every output {dtype})"


def known_defect(target: Target, dtype: torch.dtype) -> str | None:
    """The reference defect the modules meet on ``target``: bfloat16 autocast on a real
    CUDA device, where the modules run cuDNN (seen on torch 2.11.0+cu130, H100, for every
    row of the matrix); the fake tier decomposes the modules and never meets it."""
    if target.device == "cuda" and not target.fake and dtype == torch.bfloat16:
        return CUDNN_BF16_DEFECT
    return None


def expected_output(device: str, row: RnnRow) -> str | None:
    """AMP or FP32: the dtype of every output of ``row`` under autocast on ``device``
    (verified on torch 2.13); None where nothing is recorded for the device."""
    if device == "cuda":
        # cuDNN's _cudnn_rnn is in the lower-precision list; without cuDNN the fused
        # cells (_thnn_fused_lstm_cell/_gru_cell) and linear are too (seen through
        # --fake for the unpacked LSTM and RNN_TANH rows; the rest from the policy)
        return AMP
    if device == "cpu":
        if row.mode == "LSTM" and not row.packed:
            return AMP  # the oneDNN path: aten::mkldnn_rnn_layer casts to the amp dtype
        if row.mode == "RNN_TANH":
            return AMP  # tanh(linear(x) + linear(h)): both linears in the amp dtype
        # packed LSTM and GRU run the native cells: the gates come out of linear in the
        # amp dtype, the update with the float32 initial state promotes to float32
        return FP32
    return None


def _rnn_class(mode: str) -> Any:
    if mode == "RNN_TANH":
        return lambda *a, **k: torch.nn.RNN(*a, nonlinearity="tanh", **k)
    return getattr(torch.nn, mode)


def make_module(target: Target, row: RnnRow) -> torch.nn.Module:
    """The module with fixed-seed weights on the device; on a fake target a meta module
    (made outside FakeTensorMode, which cannot swap RNN parameters) for :func:`build`."""
    kwargs = dict(num_layers=row.layers, bidirectional=row.bidirectional,
                  batch_first=row.batch_first)
    if target.fake:
        return _rnn_class(row.mode)(_IN, _HIDDEN, device="meta", **kwargs)
    torch.manual_seed(0)
    return _rnn_class(row.mode)(_IN, _HIDDEN, **kwargs).to(target.device)


def build(target: Target, row: RnnRow, module: torch.nn.Module) -> tuple:
    """The module ready to run, its padded input (requires grad on a real device) and the
    module's input (the padded tensor, or the packed sequence). On a fake target: called
    inside its FakeTensorMode, parameters fake and without grad."""
    dev = target.device
    shape = (len(_LENGTHS), _SEQ, _IN) if row.batch_first else (_SEQ, len(_LENGTHS), _IN)
    if target.fake:
        module = module.to_empty(device=dev).requires_grad_(False)
        x = torch.zeros(shape, device=dev)
    else:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dev)
        x.requires_grad_()
    if not row.preflattened:
        with torch.no_grad():
            for p in module.parameters():
                p.set_(p.clone())
    if row.packed:
        lengths = torch.tensor(_LENGTHS)
        return module, x, pack_padded_sequence(x, lengths, batch_first=row.batch_first)
    return module, x, x


def outputs(result: tuple) -> list[tuple[str, torch.Tensor]]:
    out, hidden = result
    data = out.data if isinstance(out, PackedSequence) else out
    states = hidden if isinstance(hidden, tuple) else (hidden,)
    return [("output", data)] + [(name, t) for name, t in zip(("h_n", "c_n"), states,
                                                             strict=False)]


def onednn_lstm_missing(dtype: torch.dtype) -> str | None:
    """Why this CPU cannot run torch.lstm under cpu autocast in ``dtype``, or None (the
    machine probe of :mod:`amp_conformance.core.hardware`: tried once, never assumed)."""
    found = hardware.onednn_lstm(dtype)
    return f"not applicable: {found}" if found else None


def not_applicable(target: Target, dtype: torch.dtype, row: RnnRow) -> str | None:
    """Why ``row`` cannot run here, or None."""
    if target.fake and row.packed:
        return ("not applicable in --fake mode: a packed sequence's batch sizes are read as "
                "values (aten._local_scalar_dense), which fake tensors lack")
    if target.device == "cpu" and row.mode == "LSTM" and not row.packed \
            and torch.backends.mkldnn.is_available():
        return onednn_lstm_missing(dtype)
    return None


def run_forward(target: Target, dtype: torch.dtype, row: RnnRow) -> tuple:
    """The module, its input and outputs of one forward under autocast. Raises
    NotApplicable where the row cannot run here; on a fake target, also where an op
    calls into the absent device's runtime."""
    reason = not_applicable(target, dtype, row)
    if reason:
        raise NotApplicable(reason)
    module = make_module(target, row)
    try:
        with target.tensors():
            module, x, inp = build(target, row, module)
            with target.autocast(dtype):
                return module, x, module(inp)
    except (RuntimeError, AssertionError, NotImplementedError) as exc:  # _lazy_init asserts
        if fake_runtime(target, exc):
            raise NotApplicable(f"not applicable in --fake mode: {row.mode} on fake {target.device} "
                                f"takes a path fake tensors cannot run on this torch build "
                                f"(the device's runtime or a kernel without a Meta "
                                f"implementation): {str(exc).splitlines()[0]}") from None
        raise


def check_forward_dtypes(target: Target, dtype: torch.dtype, row: RnnRow) -> None:
    """Every output of the module has the dtype recorded for the device."""
    recorded = expected_output(target.device, row)
    if recorded is None:
        raise NotApplicable(f"not applicable: no RNN output dtypes are recorded for "
                            f"{target.device} (checks/rnn_modules/check.py expected_output)")
    want = dtype if recorded == AMP else torch.float32
    _, _, result = run_forward(target, dtype, row)
    got = [(name, t.dtype) for name, t in outputs(result)]
    wrong = [f"{name} {d}" for name, d in got if d != want]
    if wrong:
        shared = {d for _, d in got}
        uniform = f" {every_output(shared.pop())}" if len(shared) == 1 else ""
        raise ConformanceFailure(
            f"{row.id} ({row.describe()}) under torch.autocast({target.device!r}, dtype={dtype}): "
            f"{', '.join(wrong)}; expected {want} for every output{uniform}"
        )


def check_backward_grads(target: Target, dtype: torch.dtype, row: RnnRow) -> None:
    """Backward gives every float32 parameter and the input a finite float32 gradient."""
    module, x, result = run_forward(target, dtype, row)
    loss = sum(t.float().sum() for _, t in outputs(result))
    loss.backward()
    where = (f"{row.id} ({row.describe()}) under torch.autocast({target.device!r}, "
             f"dtype={dtype}), backward outside")
    for name, p in [("input", x), *module.named_parameters()]:
        g = p.grad
        if g is None or g.dtype != p.dtype or not bool(torch.isfinite(g).all()):
            raise ConformanceFailure(
                f"{where}: the gradient of {name} ({p.dtype}) is "
                f"{'None' if g is None else f'{g.dtype}, finite={bool(torch.isfinite(g).all())}'}"
                f"; expected a finite {p.dtype} gradient"
            )


def check_lower_precision_weights(dtype: torch.dtype) -> None:
    """CPU: an LSTM with weights in the amp dtype rejects a float32 input outside autocast
    and runs it inside, with outputs in the amp dtype (upstream test_autocast_rnn)."""
    g = torch.Generator().manual_seed(0)
    x, hx, cx = (torch.randn(shape, generator=g) for shape in ((1, 2, 1), (2, 2, 1), (2, 2, 1)))
    torch.manual_seed(0)
    module = torch.nn.LSTM(1, 1, 2).to(dtype)
    wording = messages.expected("rnn_input_weight_dtype")
    expected = wording.text.format(dtype=dtype) if wording else "(no wording recorded)"
    try:
        module(x, (hx, cx))
    except ValueError as exc:
        if wording is None or not wording.matches(str(exc), dtype=str(dtype)):
            raise ConformanceFailure(f"outside autocast an LSTM with {dtype} weights raised "
                                     f"ValueError {exc}, expected {expected!r}") from None
    else:
        raise ConformanceFailure(f"outside autocast an LSTM with {dtype} weights accepted a "
                                 f"float32 input; expected ValueError {expected!r}")
    with torch.autocast("cpu", dtype=dtype):
        out, (h, c) = module(x, (hx, cx))
    wrong = [f"{n} {t.dtype}" for n, t in (("output", out), ("h_n", h), ("c_n", c))
             if t.dtype != dtype]
    if wrong:
        raise ConformanceFailure(f"an LSTM with {dtype} weights under torch.autocast('cpu', "
                                 f"dtype={dtype}) on a float32 input: {', '.join(wrong)}; "
                                 f"expected {dtype}")
