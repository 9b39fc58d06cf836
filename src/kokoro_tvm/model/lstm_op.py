"""Length-aware bidirectional LSTM as a single opaque torch op.

Kokoro runs every ``nn.LSTM`` over ``pack_padded_sequence`` inputs.  For TVM we
pad inputs to static time "buckets", so the compiled graph needs an LSTM that
also takes the valid length at run time: the forward direction runs over
``t = 0 .. len-1``, the backward direction starts at ``len-1``, and outputs at
``t >= len`` are zero.  ``torch.export`` cannot trace packed sequences into
anything TVM understands, so we wrap the whole computation in one custom op
(``kokoro_tvm::lstm``) that exports as a single node; ``relax_lstm`` supplies
the TVM lowering for that node.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["lstm", "lstm_with_lengths"]


@torch.library.custom_op("kokoro_tvm::lstm", mutates_args=())
def lstm(
    x: Tensor,
    lengths: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor,
    b_hh: Tensor,
    w_ih_r: Tensor,
    w_hh_r: Tensor,
    b_ih_r: Tensor,
    b_hh_r: Tensor,
) -> Tensor:
    """Bidirectional 1-layer batch-first LSTM over the first ``lengths[b]`` steps.

    ``x`` is ``[B, T, I]`` float32, ``lengths`` is ``[B]`` int64 with values in
    ``1..T``; weights use the ``nn.LSTM`` layout (``w_ih`` ``[4H, I]``, ``w_hh``
    ``[4H, H]``, gate order i, f, g, o; ``*_r`` = reverse direction).  Returns
    ``[B, T, 2H]`` = ``[forward | backward]``, zero at ``t >= lengths[b]``.

    The eager kernel *is* the packed-sequence reference (pack, run the packed
    LSTM kernel ``nn.LSTM`` uses, pad back to ``T``), so eager results match
    Kokoro's original code exactly.
    """
    batch, steps, _ = x.shape
    hidden = w_hh.shape[1]
    packed = pack_padded_sequence(
        x, lengths.to("cpu", torch.int64), batch_first=True, enforce_sorted=False
    )
    h0 = x.new_zeros(2, batch, hidden)
    # Same call nn.LSTM.forward makes for a PackedSequence input (zero h0/c0, so
    # the sorted_indices permutation of hx is irrelevant).
    data, _, _ = torch.lstm(
        packed.data,
        packed.batch_sizes,
        (h0, h0),
        [w_ih, w_hh, b_ih, b_hh, w_ih_r, w_hh_r, b_ih_r, b_hh_r],
        True,  # has_biases
        1,  # num_layers
        0.0,  # dropout
        False,  # train
        True,  # bidirectional
    )
    out_packed = PackedSequence(
        data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices
    )
    out, _ = pad_packed_sequence(out_packed, batch_first=True, total_length=steps)
    return out.contiguous()


@lstm.register_fake
def _lstm_fake(x, lengths, w_ih, w_hh, b_ih, b_hh, w_ih_r, w_hh_r, b_ih_r, b_hh_r):
    # Output shape depends only on static shapes, which is what lets
    # torch.export keep the op as one opaque node.
    batch, steps, _ = x.shape
    return x.new_empty((batch, steps, 2 * w_hh.shape[1]))


def lstm_with_lengths(module: nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """Run ``module`` on ``x`` ``[B, T, I]`` honouring per-batch valid ``lengths``.

    Drop-in for ``pad_packed_sequence(module(pack_padded_sequence(x, lengths,
    batch_first=True, enforce_sorted=False)), total_length=T)[0]``, but
    expressed as one ``kokoro_tvm::lstm`` call so it survives ``torch.export``.
    Only the configuration Kokoro uses is supported (1 layer, bidirectional,
    batch_first, with biases, no projection); anything else raises ValueError
    instead of silently computing something different.
    """
    if not isinstance(module, nn.LSTM):
        raise TypeError(f"expected nn.LSTM, got {type(module).__name__}")
    if module.num_layers != 1 or not module.bidirectional or not module.batch_first:
        raise ValueError(
            "lstm_with_lengths needs a 1-layer, bidirectional, batch_first nn.LSTM; got "
            f"num_layers={module.num_layers}, bidirectional={module.bidirectional}, "
            f"batch_first={module.batch_first}"
        )
    if not module.bias or module.proj_size != 0:
        raise ValueError("lstm_with_lengths needs bias=True and proj_size=0")
    if x.dim() != 3:
        raise ValueError(f"expected x of shape [B, T, I], got {tuple(x.shape)}")
    if lengths.dtype != torch.int64:
        lengths = lengths.to(torch.int64)
    return lstm(
        x,
        lengths,
        module.weight_ih_l0,
        module.weight_hh_l0,
        module.bias_ih_l0,
        module.bias_hh_l0,
        module.weight_ih_l0_reverse,
        module.weight_hh_l0_reverse,
        module.bias_ih_l0_reverse,
        module.bias_hh_l0_reverse,
    )
