"""Relax lowerings of ``kokoro_tvm::lstm`` for ``from_exported_program``.

Usage::

    mod = from_exported_program(ep, custom_convert_map=lstm_convert_map("loop"))

Both strategies compute the bidirectional LSTM of ``kokoro_tvm.lstm_op.lstm``
with the valid length read from the ``lengths`` tensor *at run time* (``T`` is
fixed at export, ``lengths[b]`` may be anything in ``1..T`` per call).  With the
loop strategy ``T`` may also be symbolic (an export with a length bounded by a
``Dim``): the kernel then reads it from its buffers, one kernel for every ``T``.  One rule
covers both directions: a step ``t`` with ``t >= lengths[b]`` leaves the
``(h, c)`` state untouched and writes a zero output.  The forward direction
therefore freezes after ``len-1``; the backward direction (walking
``T-1 .. 0``) keeps its zero initial state through the padding and effectively
starts at ``len-1``, which is exactly what packed sequences compute.

* ``"unroll"``: plain Relax ops, one block of ops per time step.  Simple and
  fully fusable, but the IR (and import/build time) grows linearly with ``T``.
* ``"loop"``: the input projections stay Relax matmuls; the recurrence is one
  TIR PrimFunc with a serial time loop, so the IR size is independent of ``T``.

Weights may be bound constants or function inputs (``keep_params_as_input``);
neither strategy relies on constant folding for correctness.  Lengths outside
``1..T`` are not rejected: ``<= 0`` gives all zeros, ``> T`` behaves like ``T``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tvm import relax
from tvm.script import tirx as T

from ..spec import LSTM_STRATEGIES as STRATEGIES  # one list: params validates against it
from . import vector_math
from .hand_written import FLOPS, largest_divisor
from .symbolic import static_dim

__all__ = ["STRATEGIES", "lstm_convert_map"]

#: Key under which the importer looks up ``torch.ops.kokoro_tvm.lstm.default``
#: (TVM 0.27 keys custom converters by the fx target's ``__name__``).
_OP_KEY = "lstm.default"


def lstm_convert_map(strategy: str = "loop") -> dict[str, Callable]:
    """Return a ``custom_convert_map`` lowering ``kokoro_tvm::lstm`` with ``strategy``.

    ``strategy`` is ``"unroll"`` (per-step Relax ops) or ``"loop"`` (one TIR
    kernel with a time loop; IR size independent of ``T``).
    """
    converters = {"unroll": _convert_unroll, "loop": _convert_loop}
    if strategy not in converters:
        raise ValueError(
            f"unknown LSTM lowering strategy {strategy!r}; "
            f"valid strategies: {', '.join(STRATEGIES)}"
        )
    return {_OP_KEY: converters[strategy]}


# --------------------------------------------------------------------------- #
# shared helpers
# --------------------------------------------------------------------------- #


def _static_int(value, what: str) -> int:
    if (dim := static_dim(value)) is None:
        raise NotImplementedError(f"kokoro_tvm::lstm lowering needs a static {what}, got {value}")
    return dim


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
    batch, in_size = _static_int(x.ty.shape[0], "B"), _static_int(x.ty.shape[2], "I")
    steps = x.ty.shape[1]  # an int, or a symbolic length (only the loop strategy takes it)
    steps = steps if static_dim(steps) is None else static_dim(steps)
    hidden = _static_int(w_hh.ty.shape[1], "hidden size")
    return args, batch, steps, in_size, hidden


def _input_projection(bb, x, w_ih, b_ih, b_hh):
    """``x @ w_ih^T + (b_ih + b_hh)`` for all steps at once: ``[B, T, 4H]``.

    Hoisting this out of the recurrence turns T small matmuls into one big
    one.  Written as the permute+matmul+add that ``nn.Linear`` imports to, so
    FoldConstant (bound weights) or the model's matmul handling applies.
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
    steps = _static_int(steps, "T (the unroll strategy unrolls it; use lstm.strategy: loop)")
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


def _layout(hidden: int) -> tuple[int, int]:
    """``(chunk, sub)``: hidden units per accumulator block and blocks per parallel task.

    16 units x 4 gates are 8 AVX2 (4 AVX-512) accumulator registers, enough independent FMAs to
    hide their latency; 2 blocks per task give 16 tasks at H = 256, work for up to 16 cores."""
    chunk = largest_divisor(hidden, (16, 8, 4, 2))
    return chunk, largest_divisor(hidden // chunk, (2,))


def packed_w_hh_shape(hidden: int) -> tuple[int, int, int, int]:
    """``w_hh`` ``[4H, H]`` as the recurrence reads it: ``[H / chunk, H, 4, chunk]``."""
    chunk, _ = _layout(hidden)
    return hidden // chunk, hidden, 4, chunk


def _pack_w_hh(bb, w_hh, hidden: int):
    """``w_hh[q*H + c*chunk + u, k]`` -> ``[c, k, q, u]``: per step a task streams one contiguous
    block of weights. Parameter-only, so ``LiftTransformParams`` runs it once at load."""
    n_chunk, _, _, chunk = packed_w_hh_shape(hidden)
    op = relax.op
    blocks = op.reshape(w_hh, (4, n_chunk, chunk, hidden))  # [q, c, u, k]
    return bb.emit(op.permute_dims(blocks, axes=[1, 3, 0, 2]))


def _recurrence_kernel(batch: int, steps: int | None, hidden: int):
    """TIR PrimFunc running both LSTM directions over one serial time loop.

    ``steps=None``: ``T`` is symbolic (a bounded-length export), and the kernel reads it from
    its buffers' shapes.

    Inputs: ``x_fwd``/``x_bwd`` ``[B, T, 4H]`` (input projection plus both biases, per
    direction), ``w_fwd``/``w_bwd`` packed by ``_pack_w_hh``, ``lengths`` ``[B]`` int64.
    Output ``[B, T, 2H]``.

    Per step ``s`` there is one parallel loop over (direction, task); forward handles ``t = s``
    and backward ``t = T-1-s`` in the same launch. A task computes ``h @ w_hh^T`` for its units
    as a GEMV: for each ``k`` it broadcasts ``h[k]`` and adds it times a contiguous row of
    ``4 x chunk`` packed weights to as many accumulators, which vectorizes without horizontal
    sums or fast-math; then ``c`` and ``h`` are updated in place. ``h`` is double-buffered by
    step parity since every task reads all of the previous ``h``. Steps with ``t >= lengths[b]``
    carry the state over and write zeros. At H = 256 the weights (1 MB per direction) stream
    from L3 on every step, and the GEMV ran faster than per-unit dot products
    (docs/measurements.md, "LSTM recurrence as a GEMV").
    """
    chunk, sub = _layout(hidden)
    n_chunk = hidden // chunk
    n_task = n_chunk // sub
    per_task = chunk * sub
    step_flops = 2 * batch * 2 * (4 * hidden) * hidden  # multiply-adds of both directions' GEMVs

    @T.macro
    def direction_task(x_proj, w_hh, lengths, h_buf, c_buf, out, b, s, d, task, t):
        if T.Cast("int64", t) < lengths[b]:
            acc = T.alloc_buffer((4, chunk), "float32", scope="local")  # gate pre-activations
            for si in range(sub):
                for q in T.unroll(4):
                    for u in T.vectorized(chunk):
                        acc[q, u] = T.float32(0)
                w_block = task * sub + si
                for k in range(hidden):
                    for q in T.unroll(4):
                        for u in T.vectorized(chunk):
                            acc[q, u] = acc[q, u] + w_hh[w_block, k, q, u] * h_buf[s % 2, d, k]
                # (TVM 0.27: a let bound to `u` inside a vector loop wrote zeros)
                base = task * per_task + si * chunk
                for q in T.unroll(4):
                    for u in T.vectorized(chunk):
                        acc[q, u] = acc[q, u] + x_proj[b, t, q * hidden + base + u]
                # the block's gates as one vector (vector_math's polynomials): faster than scalar
                # gates or libm's, bit-identical to the scalar polynomials (docs/measurements.md,
                # "LSTM gates as one vector")
                for u in T.vectorized(chunk):
                    c_buf[d, base + u] = vector_math.sigmoid(acc[1, u]) * c_buf[
                        d, base + u
                    ] + vector_math.sigmoid(acc[0, u]) * vector_math.tanh(acc[2, u])
                    h_buf[(s + 1) % 2, d, base + u] = vector_math.sigmoid(
                        acc[3, u]
                    ) * vector_math.tanh(c_buf[d, base + u])
                    out[b, t, d * hidden + base + u] = h_buf[(s + 1) % 2, d, base + u]
        else:
            for ji in range(per_task):
                h_buf[(s + 1) % 2, d, task * per_task + ji] = h_buf[s % 2, d, task * per_task + ji]
                out[b, t, d * hidden + task * per_task + ji] = T.float32(0)

    @T.macro
    def recurrence(x_fwd, x_bwd, w_fwd, w_bwd, lengths, out, n_steps, last):
        h_buf = T.alloc_buffer((2, 2, hidden), "float32")  # [parity, direction, unit]
        c_buf = T.alloc_buffer((2, hidden), "float32")  # [direction, unit]
        for b in range(batch):
            for d, j in T.grid(2, hidden):
                h_buf[0, d, j] = T.float32(0)
                c_buf[d, j] = T.float32(0)
            for s in T.serial(n_steps):
                for task in T.parallel(2 * n_task):
                    if task < n_task:
                        direction_task(x_fwd, w_fwd, lengths, h_buf, c_buf, out, b, s, 0, task, s)
                    else:
                        direction_task(
                            x_bwd,
                            w_bwd,
                            lengths,
                            h_buf,
                            c_buf,
                            out,
                            b,
                            s,
                            1,
                            task - n_task,
                            last - s,
                        )

    if isinstance(steps, int):

        @T.prim_func(private=True)
        def lstm_recurrence(
            x_fwd: T.Buffer((batch, steps, 4 * hidden), "float32"),
            x_bwd: T.Buffer((batch, steps, 4 * hidden), "float32"),
            w_fwd: T.Buffer((n_chunk, hidden, 4, chunk), "float32"),
            w_bwd: T.Buffer((n_chunk, hidden, 4, chunk), "float32"),
            lengths: T.Buffer((batch,), "int64"),
            out: T.Buffer((batch, steps, 2 * hidden), "float32"),
        ):
            T.func_attr(
                {"tirx.noalias": True, FLOPS: step_flops * steps}
            )  # TVM 0.27 reads "tirx.", not "tir."
            recurrence(x_fwd, x_bwd, w_fwd, w_bwd, lengths, out, steps, steps - 1)

        return lstm_recurrence

    @T.prim_func(private=True)
    def lstm_recurrence_symbolic(
        var_x_fwd: T.handle,
        var_x_bwd: T.handle,
        w_fwd: T.Buffer((n_chunk, hidden, 4, chunk), "float32"),
        w_bwd: T.Buffer((n_chunk, hidden, 4, chunk), "float32"),
        lengths: T.Buffer((batch,), "int64"),
        var_out: T.handle,
    ):
        # T comes from the buffers: one kernel for any length up to the export's bound
        n_steps = T.int64()
        T.func_attr({"tirx.noalias": True, FLOPS: step_flops * n_steps})
        x_fwd = T.match_buffer(var_x_fwd, (batch, n_steps, 4 * hidden), "float32")
        x_bwd = T.match_buffer(var_x_bwd, (batch, n_steps, 4 * hidden), "float32")
        out = T.match_buffer(var_out, (batch, n_steps, 2 * hidden), "float32")
        recurrence(x_fwd, x_bwd, w_fwd, w_bwd, lengths, out, n_steps, n_steps - 1)

    return lstm_recurrence_symbolic


def _convert_loop(node, importer) -> relax.Var:
    """Lower with Relax input projections plus one TIR recurrence kernel."""
    args, batch, steps, _, hidden = _unpack(node, importer)
    x, lengths = args[0], args[1]
    bb = importer.block_builder

    # Same permute+matmul+add pattern nn.Linear imports to, so whatever
    # schedules/offloads the model's matmuls handles these too.
    x_fwd = _input_projection(bb, x, args[2], args[4], args[5])
    x_bwd = _input_projection(bb, x, args[6], args[8], args[9])

    # add_func de-duplicates structurally equal kernels (same B, T, H) and
    # makes the name unique within the module; the kernel is private (no
    # global_symbol), so AttachGlobalSymbol later uses that unique name rather
    # than a colliding "main".
    static = isinstance(steps, int)
    gvar = bb.add_func(
        _recurrence_kernel(batch, steps if static else None, hidden),
        f"kokoro_lstm_b{batch}_t{steps if static else 'n'}_h{hidden}",
    )
    out_ty = relax.TensorType((batch, steps, 2 * hidden), "float32")
    w_fwd, w_bwd = _pack_w_hh(bb, args[3], hidden), _pack_w_hh(bb, args[7], hidden)
    return bb.emit(relax.call_tir(gvar, [x_fwd, x_bwd, w_fwd, w_bwd, lengths], out_ty))
