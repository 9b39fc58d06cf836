"""Direct convolutions with bf16 products (``compile.bf16``): the decoder body's wide convs.

The decoder body's convs (514-1090 input channels, 512-1024 output, kernel 1 or 3, at the frame
rate) are GEMMs that float32 already runs near the FMA peak, and too wide for Winograd's or an
FFT's transformed weights (``bf16.MAX_CHANNELS``). ``vdpbf16ps`` doubles the products per
instruction instead, and the weights it reads are half float32's bytes.

The pairs run along the input channels: ``pack_input`` pairs channels ``2p`` and ``2p + 1`` of
each padded time step (an injective op, which ``FuseOps`` fuses into whatever computes the conv's
input), ``pack_weights`` the same channels of each tap and output channel. The kernel broadcasts
one input pair to 16 lanes and multiplies it by 16 output channels' weight pairs into a
``ROWS x VECTORS`` register tile of time steps x 16 output channels, then writes 16 time steps of
each 16 channels through a 16 x 16 transpose in registers (``bf16.transpose16``).
"""

from __future__ import annotations

import numpy as np

from . import bf16
from .hand_written import FLOPS, made_by

#: Time steps x vectors of 16 output channels per register tile: 8 x 2 accumulators, 2 weight
#: vectors and a broadcast; each broadcast pair feeds two products.
ROWS = 8
VECTORS = 2
#: Time steps a block writes through one transpose.
STEPS = 16
MAKER_NAME = bf16.MAKERS[1]


def padded_length(length, taps: int, dilation: int):
    """Time steps of ``pack_input``'s output for an input of ``length``: the conv's reach on both
    sides and whole ``STEPS`` blocks (the last block reads zeros past the end)."""
    return (length + STEPS - 1) // STEPS * STEPS + dilation * (taps - 1)


def pack_weights(w: np.ndarray, vectors: int = VECTORS) -> np.ndarray:
    """``w [O, C, r]`` -> ``[O/n, r, C/2, n]`` bf16 pairs (``uint32``) of input channels
    ``2p, 2p+1``, ``n = 16 vectors`` output channels: one register tile's weights in the order it
    reads them."""
    o, c, r = w.shape
    n = vectors * bf16.LANES
    tiles = w.reshape(o // n, n, c // 2, 2, r).transpose(0, 4, 2, 1, 3)  # ot, k, p, oo, half
    return bf16.pack_pairs(tiles[..., 0], tiles[..., 1])


def weight_transform(bb, w, vectors: int = VECTORS):
    """``pack_weights`` as a Relax op on the parameter ``w`` (lifted to load time)."""
    from tvm import te

    o, c, r = (int(v) for v in w.ty.shape)
    n = vectors * bf16.LANES

    def packed(w):
        return te.compute(
            (o // n, r, c // 2, n),
            lambda t, k, p, oo: bf16.pairs(w[t * n + oo, 2 * p, k], w[t * n + oo, 2 * p + 1, k]),
            name="bf16_pairs",
        )

    return bb.emit_te(packed, w, primfunc_name_hint="bf16_direct_weights")


def pack_input(bb, x, taps: int, dilation: int, pad_left: int):
    """``x [1, C, L]`` -> ``[padded_length(L), C/2]`` bf16 pairs of channels ``2p, 2p+1`` at each
    time step ``j - pad_left``, zero outside ``[0, L)``: time-major, so that the kernel reads each
    time step's pairs in order."""
    from tvm import te, tirx

    def packed(x):
        c, length = x.shape[1], x.shape[2]
        zero = tirx.const(0.0, "float32")

        def at(ch, j):
            t = j - pad_left
            return tirx.Select(
                tirx.all(t >= 0, t < length), x[0, ch, tirx.max(tirx.min(t, length - 1), 0)], zero
            )

        return te.compute(
            (padded_length(length, taps, dilation), c // 2),
            lambda j, p: bf16.pairs(at(2 * p, j), at(2 * p + 1, j)),
            name="bf16_input_pairs",
        )

    return bb.emit_te(packed, x, primfunc_name_hint="bf16_direct_input")


def kernel_for(**sizes: int):
    """``kernel`` marked with its maker (``hand_written.made_by``): one per shape in a module."""
    return made_by(kernel(**sizes), MAKER_NAME, **sizes)


def kernel(
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    rows: int = ROWS,
    vectors: int = VECTORS,
):
    """TIR kernel ``(xp [P, C/2] uint32, w [O/n, r, C/2, n] uint32) -> y [1, O, W]`` for any
    ``W`` (``P = padded_length(W)``, ``n = 16 vectors``):
    ``y[o, t] = sum_{p, k} w[o / n, k, p, o % n] . xp[t + d k, p]``, the conv on ``pack_input``'s
    and ``pack_weights``' pairs."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    lanes = bf16.LANES
    channels = vectors * lanes
    pairs_in, d = channels_in // 2, dilation
    if channels_in % 2 or channels_out % channels or STEPS % rows:
        raise ValueError(f"a direct bf16 conv {channels_in} -> {channels_out}")
    f32 = T.float32

    with IRBuilder() as ib:
        with T.prim_func(private=True):
            width, padded = T.int64(), T.int64()
            xp = T.match_buffer(T.arg("xp", T.handle()), (padded, pairs_in), "uint32")
            w = T.match_buffer(
                T.arg("w", T.handle()),
                (channels_out // channels, taps, pairs_in, channels),
                "uint32",
            )
            y = T.match_buffer(T.arg("y", T.handle()), (1, channels_out, width), "float32")
            T.func_attr(
                {"tirx.noalias": True, FLOPS: 2 * channels_in * channels_out * taps * width}
            )
            blocks = (width + STEPS - 1) // STEPS
            with bf16.helpers(T), T.parallel(0, channels_out // channels) as ot:
                acc = T.alloc_buffer((vectors, rows, lanes), "float32", scope="local")
                tile = T.alloc_buffer((STEPS, channels), "float32", scope="local")
                with T.serial(0, blocks) as b:
                    t0 = b * STEPS
                    with T.serial(0, STEPS // rows) as half:
                        with T.grid(vectors, rows) as (v, r):
                            with T.vectorized(0, lanes) as ll:
                                T.buffer_store(acc, f32(0), [v, r, ll])
                        with T.grid(taps, pairs_in) as (k, p):
                            with T.unroll(0, rows) as r:
                                at = t0 + half * rows + r + d * k
                                wide = T.Broadcast(xp[at, p], lanes)
                                for v in range(vectors):
                                    ramp = T.Ramp(0, 1, lanes)
                                    weights = w[ot, k, p, T.Ramp(v * lanes, 1, lanes)]
                                    T.buffer_store(
                                        acc,
                                        bf16.dot(T, acc[v, r, ramp], weights, wide),
                                        [v, r, ramp],
                                    )
                        with T.grid(vectors, rows) as (v, r):
                            with T.vectorized(0, lanes) as ll:
                                T.buffer_store(
                                    tile, acc[v, r, ll], [half * rows + r, v * lanes + ll]
                                )
                    with T.serial(0, vectors) as v:
                        o0 = ot * channels + v * lanes

                        def whole():
                            bf16.transpose16(T, tile[0, v * lanes], channels, y[0, o0, t0], width)

                        def edge():  # the last block: steps past W are not stored
                            with T.grid(lanes, width - t0) as (ll, s_):
                                T.buffer_store(y, tile[s_, v * lanes + ll], [0, o0 + ll, t0 + s_])

                        with T.If(t0 + STEPS <= width):
                            with T.Then():
                                whole()
                            with T.Else():
                                edge()
    return ib.get()
