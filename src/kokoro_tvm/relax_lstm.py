"""Relax lowerings of ``kokoro_tvm::lstm`` for ``from_exported_program``.

Usage::

    mod = from_exported_program(ep, custom_convert_map=lstm_convert_map("loop"))

Both strategies compute the bidirectional LSTM of ``kokoro_tvm.lstm_op.lstm``
with the valid length read from the ``lengths`` tensor *at run time* (``T`` is
fixed at export, ``lengths[b]`` may be anything in ``1..T`` per call).  One rule
covers both directions: a step ``t`` with ``t >= lengths[b]`` leaves the
``(h, c)`` state untouched and writes a zero output.  The forward direction
therefore freezes after ``len-1``; the backward direction (walking
``T-1 .. 0``) keeps its zero initial state through the padding and effectively
starts at ``len-1``, which is exactly what packed sequences compute.

* ``"unroll"``: plain Relax ops, one block of ops per time step.  Simple and
  fully fusable, but the IR (and import/build time) grows linearly with ``T``.
* ``"loop"``: the input projection stays a Relax matmul; the recurrence is one
  TIR PrimFunc with a serial time loop, so the IR size is independent of ``T``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax
from tvm.script import tirx as T

__all__ = ["STRATEGIES", "lstm_convert_map"]

#: Key under which the importer looks up ``torch.ops.kokoro_tvm.lstm.default``
#: (TVM 0.27 keys custom converters by the fx target's ``__name__``).
_OP_KEY = "lstm.default"

STRATEGIES = ("unroll", "loop")


def lstm_convert_map(strategy: str = "loop") -> dict[str, Callable]:
    """Return a ``custom_convert_map`` lowering ``kokoro_tvm::lstm`` with ``strategy``.

    ``strategy`` is ``"unroll"`` (per-step Relax ops) or ``"loop"`` (one TIR
    kernel with a time loop; IR size independent of ``T``).
    """
    converters = {"unroll": _convert_unroll, "loop": _convert_loop}
    if strategy not in converters:
        raise ValueError(
            f"unknown LSTM lowering strategy {strategy!r}; valid strategies: {', '.join(STRATEGIES)}"
        )
    return {_OP_KEY: converters[strategy]}


# --------------------------------------------------------------------------- #
# shared helpers
# --------------------------------------------------------------------------- #


def _static_int(value, what: str) -> int:
    try:
        return int(value)
    except TypeError as err:  # symbolic tirx.Var
        raise NotImplementedError(
            f"kokoro_tvm::lstm lowering needs a static {what}, got {value}"
        ) from err


def _unpack(node, importer):
    """Check the node is ours and return (args, B, T, I, H)."""
    namespace = getattr(node.target, "namespace", "kokoro_tvm")
    if namespace != "kokoro_tvm":
        raise ValueError(f"lstm converter registered for kokoro_tvm::lstm, got {node.target}")
    args = importer.retrieve_args(node)
    if len(args) != 10:
        raise ValueError(f"kokoro_tvm::lstm expects 10 arguments, got {len(args)}")
    x, w_hh = args[0], args[3]
    if x.ty.dtype.dtype != "float32":
        raise TypeError(f"kokoro_tvm::lstm lowering supports float32 only, got {x.ty.dtype}")
    batch, steps, in_size = (_static_int(d, n) for d, n in zip(x.ty.shape, ("B", "T", "I")))
    hidden = _static_int(w_hh.ty.shape[1], "hidden size")
    return args, batch, steps, in_size, hidden


def _input_projection(bb, x, w_ih, b_ih, b_hh):
    """``x @ w_ih^T + (b_ih + b_hh)`` for all steps at once: ``[B, T, rows]``.

    The weight transpose and bias sum only touch constants, so FoldConstant
    removes them at build time.
    """
    op = relax.op
    w_t = bb.emit(op.permute_dims(w_ih, axes=[1, 0]))
    bias = bb.emit(op.add(b_ih, b_hh))
    return bb.emit(op.add(op.matmul(x, w_t), bias))


# --------------------------------------------------------------------------- #
# "unroll": Relax ops per time step
# --------------------------------------------------------------------------- #


def _convert_unroll(node, importer) -> relax.Var:
    """Lower with per-step Relax ops, masking each step by ``t < lengths``."""
    args, batch, steps, _, hidden = _unpack(node, importer)
    x, lengths = args[0], args[1]
    bb = importer.block_builder
    op = relax.op

    # [B, 1] so the per-step comparison broadcasts over the hidden axis.
    lengths_col = bb.emit(op.reshape(lengths, (batch, 1)))
    zeros = relax.const(np.zeros((batch, hidden), dtype="float32"))

    directions = []
    for d, (w_ih, w_hh, b_ih, b_hh) in enumerate((args[2:6], args[6:10])):
        x_proj = _input_projection(bb, x, w_ih, b_ih, b_hh)  # [B, T, 4H]
        w_hh_t = bb.emit(op.permute_dims(w_hh, axes=[1, 0]))  # [H, 4H]
        h, c = zeros, zeros
        outs: list = [None] * steps
        order = range(steps) if d == 0 else range(steps - 1, -1, -1)
        for t in order:
            valid = bb.emit(op.less(relax.const(t, "int64"), lengths_col))  # [B, 1] bool
            x_t = op.take(x_proj, relax.const(t, "int64"), axis=1)  # [B, 4H]
            gates = bb.emit(op.add(x_t, op.matmul(h, w_hh_t)))
            split = bb.emit(op.split(gates, 4, axis=1))
            i, f, g, o = (relax.TupleGetItem(split, k) for k in range(4))
            c_new = bb.emit(
                op.add(op.multiply(op.sigmoid(f), c), op.multiply(op.sigmoid(i), op.tanh(g)))
            )
            h_new = bb.emit(op.multiply(op.sigmoid(o), op.tanh(c_new)))
            # Invalid step: keep the state (frozen fwd / still zero bwd), emit 0.
            h = bb.emit(op.where(valid, h_new, h))
            c = bb.emit(op.where(valid, c_new, c))
            outs[t] = bb.emit(op.where(valid, h_new, zeros))
        directions.append(bb.emit(op.stack(outs, axis=1)))  # [B, T, H]
    return bb.emit(op.concat(directions, axis=2))


# --------------------------------------------------------------------------- #
# "loop": one TIR kernel with a serial time loop
# --------------------------------------------------------------------------- #


def _chunk(hidden: int) -> int:
    """Hidden units per parallel task (also the vector width of the inner loop)."""
    for width in (16, 8, 4, 2):
        if hidden % width == 0:
            return width
    return 1


def _recurrence_kernel(batch: int, steps: int, hidden: int, chunk: int):
    """TIR PrimFunc running both LSTM directions over a serial time loop.

    Inputs: ``x_proj`` ``[B, T, 2*4H]`` (input projection + both biases,
    forward gates then backward gates), ``w_blk`` ``[2, H/chunk, H, 4, chunk]``
    (``w_hh`` re-blocked so each task streams one contiguous block), and
    ``lengths`` ``[B]`` int64.  Output ``[B, T, 2H]``.

    Per time step ``s`` there is one parallel loop over (direction, chunk of
    ``chunk`` hidden units); forward handles ``t = s`` and backward
    ``t = T-1-s`` in the same step.  Each task computes its units' four gates
    (``h @ w_hh^T`` with a vectorised inner loop) and updates ``c``/``h``.
    ``h`` is double-buffered by step parity because every task reads all of
    the previous ``h``.  Steps with ``t >= lengths[b]`` copy the state forward
    and write zeros.
    """
    n_chunk = hidden // chunk
    gates = 4 * hidden
    last = steps - 1

    @T.prim_func(private=True)
    def lstm_recurrence(
        x_proj: T.Buffer((batch, steps, 2 * gates), "float32"),
        w_blk: T.Buffer((2, n_chunk, hidden, 4, chunk), "float32"),
        lengths: T.Buffer((batch,), "int64"),
        out: T.Buffer((batch, steps, 2 * hidden), "float32"),
    ):
        T.func_attr({"tir.noalias": True})
        h_buf = T.alloc_buffer((2, 2, hidden), "float32")  # [parity, direction, unit]
        c_buf = T.alloc_buffer((2, hidden), "float32")  # [direction, unit]
        for b in range(batch):
            for d, j in T.grid(2, hidden):
                h_buf[0, d, j] = T.float32(0)
                c_buf[d, j] = T.float32(0)
            for s in T.serial(steps):
                for task in T.parallel(2 * n_chunk):
                    acc = T.alloc_buffer((4, chunk), "float32", scope="local")
                    # d = task // n_chunk; t = s (forward) or T-1-s (backward)
                    if T.Cast("int64", s + (task // n_chunk) * (last - 2 * s)) < lengths[b]:
                        for q in T.unroll(4):
                            for ji in T.vectorized(chunk):
                                acc[q, ji] = x_proj[
                                    b,
                                    s + (task // n_chunk) * (last - 2 * s),
                                    (task // n_chunk) * gates
                                    + q * hidden
                                    + (task % n_chunk) * chunk
                                    + ji,
                                ]
                        for k in range(hidden):
                            for q in T.unroll(4):
                                for ji in T.vectorized(chunk):
                                    acc[q, ji] = (
                                        acc[q, ji]
                                        + w_blk[task // n_chunk, task % n_chunk, k, q, ji]
                                        * h_buf[s % 2, task // n_chunk, k]
                                    )
                        for ji in T.vectorized(chunk):
                            c_buf[task // n_chunk, (task % n_chunk) * chunk + ji] = T.sigmoid(
                                acc[1, ji]
                            ) * c_buf[task // n_chunk, (task % n_chunk) * chunk + ji] + T.sigmoid(
                                acc[0, ji]
                            ) * T.tanh(acc[2, ji])
                            h_buf[
                                (s + 1) % 2, task // n_chunk, (task % n_chunk) * chunk + ji
                            ] = T.sigmoid(acc[3, ji]) * T.tanh(
                                c_buf[task // n_chunk, (task % n_chunk) * chunk + ji]
                            )
                            out[
                                b,
                                s + (task // n_chunk) * (last - 2 * s),
                                (task // n_chunk) * hidden + (task % n_chunk) * chunk + ji,
                            ] = h_buf[(s + 1) % 2, task // n_chunk, (task % n_chunk) * chunk + ji]
                    else:
                        for ji in T.vectorized(chunk):
                            h_buf[
                                (s + 1) % 2, task // n_chunk, (task % n_chunk) * chunk + ji
                            ] = h_buf[s % 2, task // n_chunk, (task % n_chunk) * chunk + ji]
                            out[
                                b,
                                s + (task // n_chunk) * (last - 2 * s),
                                (task // n_chunk) * hidden + (task % n_chunk) * chunk + ji,
                            ] = T.float32(0)

    return lstm_recurrence


def _blocked_w_hh(bb, w_hh, hidden: int, chunk: int):
    """``w_hh`` ``[4H, H]`` -> ``[H/chunk, H, 4, chunk]`` (constant-folded at build)."""
    op = relax.op
    w = bb.emit(op.reshape(w_hh, (4, hidden // chunk, chunk, hidden)))  # [q, jc, ji, k]
    return bb.emit(op.permute_dims(w, axes=[1, 3, 0, 2]))  # [jc, k, q, ji]


def _convert_loop(node, importer) -> relax.Var:
    """Lower with a Relax input projection plus one TIR recurrence kernel."""
    args, batch, steps, _, hidden = _unpack(node, importer)
    x, lengths = args[0], args[1]
    bb = importer.block_builder
    op = relax.op
    chunk = _chunk(hidden)

    # One matmul for both directions: [B, T, 8H] = [fwd i f g o | bwd i f g o].
    w_ih = bb.emit(op.concat([args[2], args[6]], axis=0))
    b_ih = bb.emit(op.concat([args[4], args[8]], axis=0))
    b_hh = bb.emit(op.concat([args[5], args[9]], axis=0))
    x_proj = _input_projection(bb, x, w_ih, b_ih, b_hh)
    w_blk = bb.emit(
        op.stack(
            [_blocked_w_hh(bb, args[3], hidden, chunk), _blocked_w_hh(bb, args[7], hidden, chunk)],
            axis=0,
        )
    )

    kernel = _recurrence_kernel(batch, steps, hidden, chunk)
    # add_func de-duplicates structurally equal kernels and makes the name
    # unique within the module; the kernel is private (no global_symbol), so
    # AttachGlobalSymbol later uses that unique name instead of "main".
    gvar = bb.add_func(kernel, f"kokoro_lstm_b{batch}_t{steps}_h{hidden}")
    out_ty = relax.TensorType((batch, steps, 2 * hidden), "float32")
    return bb.emit(relax.call_tir(gvar, [x_proj, w_blk, lengths], out_ty))
