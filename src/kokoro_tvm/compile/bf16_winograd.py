"""Winograd's F(m, r) with bf16 products (``compile.bf16``), measured and not in the plan.

The structure is ``compile.winograd.kernel``'s (per parallel block of tiles: gather the block's
input, transform it, one GEMM per transform point into a register tile, fold each point into the
outputs with ``A^T``); the GEMM's operands are pairs of bf16 along the input channels: the weights'
transform ``U = G g`` as ``[a, C/2, O]`` pairs (``pack_weights``), the block's transformed input
``[a, C/2, tiles]``, rounded as it is transformed.

Rounding the transformed operands to bf16's 8 bits is what limits the tile: ``A^T`` amplifies it
with the points' powers. F(6, 3) (8 points, ``TILE``) loses 1 % of a random conv's output, five
times a direct bf16 conv's 0.2 %; float32's F(4, 7) and F(4, 11) lose 4 % and 30 %
(``tests/test_bf16.py``). The generator's convs therefore go through ``bf16_fft``, kernel 3
included (``bf16.method``; docs/precision.md).
"""

from __future__ import annotations

import numpy as np

from . import bf16, winograd
from .hand_written import FLOPS

#: ``(m, r)``: outputs per tile and taps.
TILE = (6, 3)
#: Tiles per register tile and vectors of 16 output channels: 24 of 32 AVX-512 registers, enough
#: independent chains for ``vdpbf16ps``'s latency.
ROWS = 6
VECTORS = 4
#: A parallel block's transformed input, at most (as ``winograd.BLOCK_BYTES``).
BLOCK_BYTES = 256 * 1024


def pack_weights(w: np.ndarray, m: int) -> np.ndarray:
    """``w [O, C, r]`` (float) -> ``U = G g`` as bf16 pairs ``[a, C/2, O]`` (``uint32``)."""
    _, g, _ = winograd.matrices(m, w.shape[2])
    u = np.einsum("pk,ock->pco", g, w.astype(np.float64)).astype(np.float32)
    return bf16.pack_pairs(u[:, 0::2], u[:, 1::2])


def kernel(
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    pad_left: int,
    m: int,
    rows: int = ROWS,
    vectors: int = VECTORS,
):
    """TIR kernel ``(x [1, C, L], u [a, C/2, O] uint32) -> y [1, O, W]`` for any ``L`` and ``W``:
    the conv ``y[o, t] = sum_{c, k} w[o, c, k] xpad[c, t + d k]`` with ``xpad`` zero outside
    ``[pad_left, pad_left + L)``, through F(m, taps) (points: ``winograd.POINTS``) on
    ``pack_weights``' pairs, products of bf16 pairs summed in float32. Tiles follow the dilation
    as in ``compile.winograd.kernel``."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    c_in, c_out, r, d = channels_in, channels_out, taps, dilation
    channels = vectors * bf16.LANES
    if c_in % 2 or c_out % channels:
        raise ValueError(
            f"a bf16 conv {c_in} -> {c_out}: even inputs, outputs a multiple of {channels}"
        )
    a = m + r - 1
    at, _, bt = winograd.matrices(m, r)
    q_tiles = max(rows, BLOCK_BYTES // (2 * a * c_in * d) // rows * rows)
    tiles = d * q_tiles
    span = d * m * q_tiles
    cols = q_tiles + (a - 1) // m + 1
    f32 = T.float32

    def scaled(term, coef: float):
        return winograd.scaled_term(T, term, coef)

    with IRBuilder() as ib:
        with T.prim_func(private=True):
            length, width = T.int64(), T.int64()
            x = T.match_buffer(T.arg("x", T.handle()), (1, c_in, length), "float32")
            u = T.match_buffer(T.arg("u", T.handle()), (a, c_in // 2, c_out), "uint32")
            y = T.match_buffer(T.arg("y", T.handle()), (1, c_out, width), "float32")
            T.func_attr(
                {
                    "tirx.noalias": True,
                    FLOPS: 2 * a * c_in * c_out * tiles * ((width + span - 1) // span),
                }
            )
            with bf16.helpers(T), T.parallel(0, (width + span - 1) // span) as blk:
                t0 = blk * span
                xt = T.alloc_buffer((c_in, d * m, cols), "float32")
                v = T.alloc_buffer((a, c_in // 2, tiles), "uint32")
                out = T.alloc_buffer((m, tiles, c_out), "float32")
                acc = T.alloc_buffer((rows, channels), "float32", scope="local")
                winograd.gather_block(T, x, xt, t0 - pad_left, length, d * m, cols)
                with T.grid(c_in // 2, d) as (c2, p):
                    with T.vectorized(0, q_tiles) as q:
                        for point in range(a):  # B^T, its zeros skipped, both channels of a pair

                            def transformed(c, point=point, p=p, q=q):
                                terms = [
                                    scaled(xt[c, p + d * (k % m), q + k // m], float(bt[point, k]))
                                    for k in range(a)
                                    if bt[point, k] != 0.0
                                ]
                                return sum(terms[1:], terms[0])

                            T.buffer_store(
                                v,
                                bf16.pairs(transformed(2 * c2), transformed(2 * c2 + 1)),
                                [point, c2, p * q_tiles + q],
                            )
                for point in range(a):
                    with T.grid(c_out // channels, tiles // rows) as (ot, jt):
                        with T.unroll(0, rows) as rr:
                            with T.vectorized(0, channels) as oo:
                                T.buffer_store(acc, f32(0), [rr, oo])
                        with T.serial(0, c_in // 2) as c2:
                            with T.unroll(0, rows) as rr:
                                wide = T.Broadcast(v[point, c2, jt * rows + rr], bf16.LANES)
                                for vec in range(vectors):
                                    lanes = T.Ramp(vec * bf16.LANES, 1, bf16.LANES)
                                    o0 = ot * channels + vec * bf16.LANES
                                    weights = u[point, c2, T.Ramp(o0, 1, bf16.LANES)]
                                    T.buffer_store(
                                        acc, bf16.dot(T, acc[rr, lanes], weights, wide), [rr, lanes]
                                    )
                        winograd.fold_point(T, out, acc, at, point, jt, ot)
                winograd.store_block(T, y, out, t0, span, width, d, q_tiles)
    return ib.get()
