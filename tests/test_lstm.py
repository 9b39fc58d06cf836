"""Tests for the length-aware LSTM op and its TVM lowerings.

Reference everywhere is ``torch.nn.LSTM`` over ``pack_padded_sequence`` inputs,
which is what Kokoro runs.  Each compiled module is built once (T fixed) and
then called with several run-time lengths, proving the lowering reads
``lengths`` at run time rather than baking it in.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_tvm.compile.lstm_lowering import STRATEGIES, lstm_convert_map
from kokoro_tvm.model.lstm_op import lstm_with_lengths

TARGET = tvm.target.Target({"kind": "llvm"})
RTOL, ATOL = 1e-4, 1e-5


class _Wrap(nn.Module):
    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.lstm = lstm

    def forward(self, x, lengths):
        return lstm_with_lengths(self.lstm, x, lengths)


def _make_lstm(in_size: int, hidden: int, seed: int = 0) -> nn.LSTM:
    torch.manual_seed(seed)
    return nn.LSTM(in_size, hidden, 1, batch_first=True, bidirectional=True).eval()


def _export(lstm: nn.LSTM, batch: int, steps: int):
    x = torch.randn(batch, steps, lstm.input_size)
    lengths = torch.full((batch,), steps, dtype=torch.int64)
    return torch.export.export(_Wrap(lstm), (x, lengths))


def _packed_reference(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])
    return out.numpy()


def _compile(lstm: nn.LSTM, batch: int, steps: int, strategy: str):
    mod = from_exported_program(
        _export(lstm, batch, steps), custom_convert_map=lstm_convert_map(strategy)
    )
    return relax.VirtualMachine(tvm.compile(mod, target=TARGET), tvm.cpu())


def _run(vm, x: torch.Tensor, lengths: torch.Tensor) -> np.ndarray:
    out = vm["main"](tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(lengths.numpy()))
    if not hasattr(out, "numpy"):  # unit tuple
        out = out[0]
    return out.numpy()


def _check_lengths(vm, lstm: nn.LSTM, steps: int, length_sets):
    torch.manual_seed(1)
    x = torch.randn(len(length_sets[0]), steps, lstm.input_size)
    hidden = lstm.hidden_size
    for lens in length_sets:
        lengths = torch.tensor(lens, dtype=torch.int64)
        got = _run(vm, x, lengths)
        ref = _packed_reference(lstm, x, lengths)
        assert got.shape == ref.shape
        for name, half in (("forward", slice(0, hidden)), ("backward", slice(hidden, None))):
            np.testing.assert_allclose(
                got[..., half], ref[..., half], rtol=RTOL, atol=ATOL, err_msg=f"{name} {lens}"
            )
        for b, n in enumerate(lens):  # padding must be exactly zero
            assert not got[b, n:].any()


# --------------------------------------------------------------------------- #
# eager op / export
# --------------------------------------------------------------------------- #


def test_eager_full_length_matches_unpacked_lstm():
    lstm = _make_lstm(24, 8)
    x = torch.randn(2, 12, 24)
    with torch.no_grad():
        got = lstm_with_lengths(lstm, x, torch.tensor([12, 12]))
        ref, _ = lstm(x)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)


def test_eager_partial_length_matches_truncated_lstm():
    # Independent of packing: a length-L run equals nn.LSTM on x[:, :L], zero-padded.
    lstm = _make_lstm(24, 8)
    x = torch.randn(1, 12, 24)
    for n in (1, 5, 11):
        with torch.no_grad():
            got = lstm_with_lengths(lstm, x, torch.tensor([n]))
            ref, _ = lstm(x[:, :n])
        torch.testing.assert_close(got[:, :n], ref, rtol=0, atol=1e-6)
        assert not got[:, n:].any()


def test_lstm_with_lengths_rejects_other_configs():
    x, lengths = torch.randn(1, 4, 6), torch.tensor([4])
    with pytest.raises(ValueError):
        lstm_with_lengths(nn.LSTM(6, 3, 1, batch_first=True), x, lengths)
    with pytest.raises(ValueError):
        lstm_with_lengths(nn.LSTM(6, 3, 2, batch_first=True, bidirectional=True), x, lengths)
    with pytest.raises(ValueError):
        lstm_with_lengths(nn.LSTM(6, 3, 1, bidirectional=True), x, lengths)


def test_export_is_single_opaque_node():
    ep = _export(_make_lstm(24, 8), 1, 12)
    # from_exported_program runs the decompositions, so the node must survive them too.
    for graph in (ep.graph, ep.run_decompositions().graph):
        calls = [n for n in graph.nodes if n.op == "call_function"]
        assert len(calls) == 1
        assert calls[0].target is torch.ops.kokoro_tvm.lstm.default


# --------------------------------------------------------------------------- #
# TVM lowerings
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tvm_tiny(strategy):
    steps = 12
    lstm = _make_lstm(24, 8)
    vm = _compile(lstm, 1, steps, strategy)
    _check_lengths(vm, lstm, steps, [[1], [2], [6], [steps - 1], [steps]])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tvm_batch_with_different_lengths(strategy):
    steps = 10
    lstm = _make_lstm(12, 4, seed=3)
    vm = _compile(lstm, 3, steps, strategy)
    _check_lengths(vm, lstm, steps, [[steps, 1, 7], [3, steps, steps - 1]])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tvm_kokoro_widths(strategy):
    steps = 32
    lstm = _make_lstm(640, 256)
    vm = _compile(lstm, 1, steps, strategy)
    _check_lengths(vm, lstm, steps, [[1], [17], [steps - 1], [steps]])


def test_loop_ir_size_independent_of_steps():
    lstm = _make_lstm(24, 8)

    def lines(strategy, steps):
        mod = from_exported_program(
            _export(lstm, 1, steps), custom_convert_map=lstm_convert_map(strategy)
        )
        return len(mod.script().splitlines())

    assert lines("loop", 16) == lines("loop", 64)
    assert lines("unroll", 64) > lines("unroll", 16)


def test_two_lstms_get_distinct_kernels():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = _make_lstm(24, 8)
            self.b = _make_lstm(16, 4, seed=1)
            self.proj = nn.Linear(16, 16)

        def forward(self, x, lengths):
            hidden = self.proj(lstm_with_lengths(self.a, x, lengths))
            return lstm_with_lengths(self.b, hidden, lengths)

    model = Two().eval()
    x = torch.randn(1, 12, 24)
    ep = torch.export.export(model, (x, torch.tensor([12])))
    mod = from_exported_program(ep, custom_convert_map=lstm_convert_map("loop"))
    kernels = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == len(set(kernels)) == 2
    vm = relax.VirtualMachine(tvm.compile(mod, target=TARGET), tvm.cpu())
    lengths = torch.tensor([7])
    with torch.no_grad():
        ref = model(x, lengths).numpy()
    np.testing.assert_allclose(_run(vm, x, lengths), ref, rtol=RTOL, atol=ATOL)


def test_unknown_strategy_raises():
    with pytest.raises(ValueError, match="unroll"):
        lstm_convert_map("scan")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tvm_params_as_inputs(strategy):
    # The project imports with keep_params_as_input=True: weights arrive at run time.
    steps = 9
    lstm = _make_lstm(24, 8, seed=5)
    mod = from_exported_program(
        _export(lstm, 1, steps),
        keep_params_as_input=True,
        custom_convert_map=lstm_convert_map(strategy),
    )
    mod, params = relax.frontend.detach_params(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, target=TARGET), tvm.cpu())
    torch.manual_seed(2)
    x = torch.randn(1, steps, 24)
    for n in (1, 4, steps):
        lengths = torch.tensor([n])
        got = vm["main"](
            tvm.runtime.tensor(x.numpy()), tvm.runtime.tensor(lengths.numpy()), *params["main"]
        )[0].numpy()
        ref = _packed_reference(lstm, x, lengths)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- #
# symbolic T (bounded-length exports)
# --------------------------------------------------------------------------- #


def _export_symbolic(lstm: nn.LSTM, bound: int):
    steps = torch.export.Dim("steps", min=2, max=bound)
    x = torch.randn(
        1, bound // 2, lstm.input_size
    )  # an example at neither bound: no 0/1 specialisation
    return torch.export.export(
        _Wrap(lstm), (x, torch.tensor([bound // 2])), dynamic_shapes=({1: steps}, None)
    )


def test_loop_kernel_runs_any_length_up_to_the_bound():
    """One library for every T <= bound: the kernel reads T from its buffers. Each length is held
    to packed nn.LSTM at that length, full and partial, as the static kernel is."""
    lstm = _make_lstm(24, 8)
    mod = from_exported_program(
        _export_symbolic(lstm, 16), custom_convert_map=lstm_convert_map("loop")
    )
    kernels = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert kernels == ["kokoro_lstm_b1_tn_h8"]
    vm = relax.VirtualMachine(tvm.compile(mod, target=TARGET), tvm.cpu())
    for steps in (16, 9, 2):
        _check_lengths(vm, lstm, steps, [[steps], [max(1, steps // 2)]])


def test_unroll_needs_a_static_length():
    lstm = _make_lstm(24, 8)
    with pytest.raises(NotImplementedError, match="static T .*lstm.strategy: loop"):
        from_exported_program(
            _export_symbolic(lstm, 16), custom_convert_map=lstm_convert_map("unroll")
        )
