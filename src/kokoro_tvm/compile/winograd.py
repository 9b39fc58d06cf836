"""The generator's convolutions in fewer multiplications: Winograd's minimal filtering F(m, r).

The decoder's convs already run near the FMA peak (docs/measurements.md, "Conv length blocks"),
so scheduling alone cannot make them much faster; doing less arithmetic can. A stride-1 conv with
``r`` taps computes ``m`` neighbouring outputs of one channel pair with ``m r`` multiplications;
F(m, r) takes ``m + r - 1`` (Toom-Cook: both sides evaluated at ``m + r - 1`` points, multiplied
pointwise, interpolated). Over channels that is, per tile of ``m`` outputs, ``m + r - 1``
independent ``[O x C] . [C]`` products: one GEMM per point over all tiles, on the input's
transform ``B^T d`` and the weights' ``G g``, and the output's ``A^T`` after it.

``kernel`` is one hand-written TIR function per conv shape: per parallel block of tiles it
gathers the block's input (zero outside ``[0, L)``: the conv's padding), transforms it (vectors
along the tiles), runs the point GEMMs with a ``ROWS x channels`` register tile of accumulators
(made for the build's target: ``compile/retarget.py``),
folds each point's product into the outputs as it goes (``A^T``), and writes the block. The
transformed input and outputs of a block stay in L2 (``BLOCK_BYTES``); with three separate
kernels they would go through memory, at 2.5x the input's size. The weights' transform ``G g``
depends on the parameters only: ``LiftTransformParams`` moves it to load time.

Numerics: the transforms round in float32, more so with more points; ``POINTS`` keeps that
small. The error of one 128-channel conv against float64 is within ``3e-5`` of its largest
output for the ``OUTPUTS`` below, against ``~1e-6`` for a direct float32 conv
(``tests/test_winograd.py``).
"""

from __future__ import annotations

import numpy as np

from .hand_written import FLOPS, MADE_FOR, find_made, made_by

#: Outputs per tile, by kernel size: the multiplications fall by ``m r / (m + r - 1)``:
#: 2.25x at kernel 3, 2.8x at 7, 3.1x at 11.
OUTPUTS = {3: 6, 7: 4, 11: 4}
#: Finite evaluation points of F(m, r) (the last point is infinity), chosen for the smallest
#: float32 error of a 128-channel conv against float64 among small fractions (0, +-1, +-2, +-1/2
#: and pairs of +-{3, 1/3, 4, 1/4, 3/2, 2/3, 3/4, 4/3, 5/2, 2/5}; docs/measurements.md,
#: "Winograd evaluation points").
POINTS = {
    (6, 3): (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5),
    (4, 7): (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.75, -0.75),
    (4, 11): (0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1 / 3, -1 / 3, 2 / 3, -2 / 3),
}
#: Tiles per register tile, and the output channels a register tile spans at most: 6 x 2 vectors
#: of accumulators on x86 (12 registers: AVX2's 16 channels, AVX-512's 32), 6 x 4 on NEON.
ROWS = 6
MAX_TILE_CHANNELS = 32
#: Output channels a conv needs a multiple of: the narrowest tile (AVX2's, NEON's).
CHANNELS = 16
#: A parallel block's transformed input, at most: it is read once per channel tile, from L2.
BLOCK_BYTES = 256 * 1024
#: Channels up to which a conv is computed this way. The decoder body's 512- and 1024-channel
#: convs keep the direct rule: their transformed weights would take ``(m + r - 1) / r`` times the
#: memory (2.7x at kernel 3, tens of MB), against the runtime's peak-RSS bar.
MAX_CHANNELS = 256
#: ``hand_written.MAKER`` of these kernels (``compile/retarget.py`` makes them again by it)
MAKER_NAME = "winograd_conv1d"


def matrices(m: int, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T [m, a], G [a, r], B^T [a, a])`` in float64 for F(m, r), ``a = m + r - 1``:
    ``y = A^T ((G g) * (B^T d))`` for ``y[i] = sum_k g[k] d[i + k]``.

    Toom-Cook: the linear convolution of an ``m``- and an ``r``-vector is evaluated at ``a``
    points (Vandermonde rows, infinity as the leading coefficient) and interpolated; the
    correlation a conv computes is its transpose."""
    a = m + r - 1
    points = POINTS.get((m, r), ())
    if len(points) != a - 1:
        raise ValueError(f"F({m}, {r}) needs {a - 1} finite points in POINTS, it has {len(points)}")

    def vandermonde(cols: int) -> np.ndarray:
        v = np.zeros((a, cols))
        for i, p in enumerate(points):
            v[i] = [p**k for k in range(cols)]
        v[a - 1, cols - 1] = 1.0
        return v

    return vandermonde(m).T, vandermonde(r), np.linalg.inv(vandermonde(a)).T


def tile_outputs(taps: int, channels_in: int, channels_out: int, groups: int) -> int | None:
    """Outputs per tile for a stride-1 conv of this shape, or None where it stays direct."""
    if groups != 1 or taps not in OUTPUTS or channels_out % CHANNELS:
        return None
    if max(channels_in, channels_out) > MAX_CHANNELS:
        return None
    return OUTPUTS[taps]


def weight_transform(bb, w, m: int):
    """``U[a, c, o] = sum_k G[a, k] w[o, c, k]`` as Relax ops on the parameter (lifted to load
    time): the layout the kernel reads a register tile's output channels from contiguously."""
    from tvm import relax

    o, c, r = (int(v) for v in w.ty.shape)
    _, g, _ = matrices(m, r)
    wt = bb.emit(relax.op.reshape(relax.op.permute_dims(w, [2, 1, 0]), [r, c * o]))
    u = bb.emit(relax.op.matmul(relax.const(g.astype(np.float32)), wt))
    return bb.emit(relax.op.reshape(u, [g.shape[0], c, o]))


def tile_channels(lanes: int, registers: int, channels_out: int) -> int:
    """Output channels per register tile for a CPU of ``lanes`` x ``registers`` vectors: as many
    vectors as ``ROWS`` rows of accumulators leave room for (4 registers for loads), at most
    ``MAX_TILE_CHANNELS``, dividing ``channels_out``."""
    vectors = max(1, min((registers - 4) // ROWS, MAX_TILE_CHANNELS // lanes))
    return next(lanes * v for v in range(vectors, 0, -1) if channels_out % (lanes * v) == 0)


def kernel_for(
    lanes: int,
    registers: int,
    *,
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    pad_left: int,
    m: int,
    bias: int = 0,
    residual: int = 0,
):
    """``kernel`` with the register tile of a CPU of ``lanes`` x ``registers`` vectors, marked
    with its maker so that the build makes it again for its target (``compile/retarget.py``)."""
    sizes = dict(
        channels_in=channels_in,
        channels_out=channels_out,
        taps=taps,
        dilation=dilation,
        pad_left=pad_left,
        m=m,
        bias=bias,
        residual=residual,
    )
    func = kernel(**sizes, channels=tile_channels(lanes, registers, channels_out))
    return made_by(func, MAKER_NAME, **sizes)


def kernel(
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    pad_left: int,
    m: int,
    channels: int = CHANNELS,
    bias: int = 0,
    residual: int = 0,
):
    """TIR kernel ``(x [1, C, L], u [a, C, O]) -> y [1, O, W]`` for any ``L`` and ``W``: the
    conv ``y[o, t] = sum_{c, k} w[o, c, k] xpad[c, t + d k]`` with ``xpad`` zero outside
    ``[pad_left, pad_left + L)``, through F(m, taps) on ``u`` (``weight_transform``). With
    ``bias``, an argument ``b [1, O, 1]`` after ``u``; with ``residual``, one ``r [1, O, W]``
    after that: ``y = (conv + b) + r``, added as the block is stored (``conv_epilogue``).

    Tiles follow the dilation: tile ``(p, q)`` of a block holds outputs ``t0 + p + d (i + m q)``,
    ``i < m``, and reads inputs ``t0 + p + d v``, ``v < a``. The block's input is first copied
    deinterleaved, ``xt[c, s, j] = xpad[t0 + s + d m j]`` (``s < d m``), so that the input
    transform of consecutive tiles is a vector load; outputs past ``W`` are not stored.
    ``channels``: output channels per register tile (``tile_channels``)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    c_in, c_out, r, d = channels_in, channels_out, taps, dilation
    a = m + r - 1
    at, _, bt = matrices(m, r)
    q_tiles = max(ROWS, BLOCK_BYTES // (4 * a * c_in * d) // ROWS * ROWS)  # tiles per phase
    tiles = d * q_tiles
    span = d * m * q_tiles  # outputs per block
    cols = q_tiles + (a - 1) // m + 1
    f32 = T.float32

    def scaled(term, coef: float):
        return scaled_term(T, term, coef)

    with IRBuilder() as ib:
        with T.prim_func(private=True):
            length, width = T.int64(), T.int64()
            x = T.match_buffer(T.arg("x", T.handle()), (1, c_in, length), "float32")
            u = T.match_buffer(T.arg("u", T.handle()), (a, c_in, c_out), "float32")
            b = T.match_buffer(T.arg("b", T.handle()), (1, c_out, 1), "float32") if bias else None
            res = (
                T.match_buffer(T.arg("r", T.handle()), (1, c_out, width), "float32")
                if residual
                else None
            )
            y = T.match_buffer(T.arg("y", T.handle()), (1, c_out, width), "float32")
            # the GEMMs' multiply-adds (the transforms add a few %): what the roofline counts
            T.func_attr(
                {
                    "tirx.noalias": True,
                    FLOPS: 2 * a * c_in * c_out * d * q_tiles * ((width + span - 1) // span),
                }
            )
            with T.parallel(0, (width + span - 1) // span) as blk:
                t0 = blk * span
                xt = T.alloc_buffer((c_in, d * m, cols), "float32")
                v = T.alloc_buffer((a, c_in, tiles), "float32")
                out = T.alloc_buffer((m, tiles, c_out), "float32")
                acc = T.alloc_buffer((ROWS, channels), "float32", scope="local")
                gather_block(T, x, xt, t0 - pad_left, length, d * m, cols)
                with T.grid(c_in, d) as (c, p):
                    with T.vectorized(0, q_tiles) as q:
                        for point in range(a):  # B^T, its zeros skipped
                            terms = [
                                scaled(xt[c, p + d * (k % m), q + k // m], float(bt[point, k]))
                                for k in range(a)
                                if bt[point, k] != 0.0
                            ]
                            T.buffer_store(v, sum(terms[1:], terms[0]), [point, c, p * q_tiles + q])
                for point in range(a):
                    with T.grid(c_out // channels, tiles // ROWS) as (ot, jt):
                        with T.unroll(0, ROWS) as rr:
                            with T.vectorized(0, channels) as oo:
                                T.buffer_store(acc, f32(0), [rr, oo])
                        with T.serial(0, c_in) as c:
                            with T.unroll(0, ROWS) as rr:
                                with T.vectorized(0, channels) as oo:
                                    T.buffer_store(
                                        acc,
                                        acc[rr, oo]
                                        + u[point, c, ot * channels + oo]
                                        * v[point, c, jt * ROWS + rr],
                                        [rr, oo],
                                    )
                        fold_point(T, out, acc, at, point, jt, ot)
                store_block(T, y, out, t0, span, width, d, q_tiles, b, res)
    return ib.get()


def scaled_term(T, term, coef: float):
    """``term * coef``, without the multiply where ``coef`` is 1 or -1."""
    return term if coef == 1.0 else (-term if coef == -1.0 else term * T.float32(coef))


def gather_block(T, x, xt, first, length, phases: int, cols: int) -> None:
    """A block's input deinterleaved, ``xt[c, s, j] = xpad[first + s + phases j]``, zero outside
    ``[0, L)``. Bounds are checked only in the blocks that reach past it: checked everywhere,
    this copy and ``store_block``'s took half the kernel's time."""
    from tvm import tirx

    c_in = int(xt.shape[0])
    with T.If(tirx.all(first >= 0, first + phases * cols <= length)):
        with T.Then():
            with T.grid(c_in, phases, cols) as (c, s, j):
                T.buffer_store(xt, x[0, c, first + s + phases * j], [c, s, j])
        with T.Else():
            with T.grid(c_in, phases, cols) as (c, s, j):
                src = first + s + phases * j
                inside = tirx.all(src >= 0, src < length)
                inner = x[0, c, T.min(T.max(src, 0), length - 1)]
                T.buffer_store(xt, T.if_then_else(inside, inner, T.float32(0)), [c, s, j])


def fold_point(T, out, acc, at, point: int, jt, ot) -> None:
    """``A^T``'s column ``point`` applied to one register tile of the GEMM's result (``acc
    [rows, channels]``: tiles from ``jt * rows``, output channels from ``ot * channels``), added
    into the block's outputs ``out [m, tiles, O]`` (stored by the first point)."""
    rows, channels = (int(n) for n in acc.shape)
    for i in range(int(at.shape[0])):
        with T.unroll(0, rows) as rr:
            with T.vectorized(0, channels) as oo:
                idx = [i, jt * rows + rr, ot * channels + oo]
                term = scaled_term(T, acc[rr, oo], float(at[i, point]))
                T.buffer_store(out, term if point == 0 else out[tuple(idx)] + term, idx)


def store_block(
    T, y, out, t0, span: int, width, d: int, q_tiles: int, bias=None, residual=None
) -> None:
    """The block's outputs ``out [m, tiles, O]`` into ``y``: tile ``(p, q)``'s output ``i`` is
    ``t0 + p + d (i + m q)``; in the last block, outputs past ``W`` are not stored. ``bias``
    ``[1, O, 1]`` and then ``residual`` (``y``'s shape), where given, are added in torch's order,
    ``(conv + b) + r``, so that the outputs equal the separate adds' bit for bit."""
    m, c_out = int(out.shape[0]), int(out.shape[2])

    def stored(o, p, q, i, t):
        value = out[i, p * q_tiles + q, o]
        if bias is not None:
            value = value + bias[0, o, 0]
        if residual is not None:
            value = value + residual[0, o, t]
        T.buffer_store(y, value, [0, o, t])

    with T.If(t0 + span <= width):
        with T.Then():
            with T.grid(c_out, d, q_tiles) as (o, p, q):
                for i in range(m):
                    stored(o, p, q, i, t0 + p + d * (i + m * q))
        with T.Else():
            with T.grid(c_out, d, q_tiles) as (o, p, q):
                for i in range(m):
                    t = t0 + p + d * (i + m * q)
                    with T.If(t < width):
                        with T.Then():
                            stored(o, p, q, i, t)


def sizes_of(call) -> dict[str, int] | None:
    """The sizes of the ``kernel`` that computes the ``relax.nn.conv1d`` ``call``, or None where
    it is not computed this way (``tile_outputs``)."""
    attrs = call.attrs
    x, w = call.args
    if (
        int(attrs.strides[0]) != 1
        or attrs.data_layout != "NCW"
        or attrs.kernel_layout != "OIW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
        or str(call.ty.dtype) != "float32"
        or str(x.ty.dtype) != "float32"
    ):
        return None
    try:
        c_out, c_in, taps = (int(v) for v in w.ty.shape)
        int(x.ty.shape[1])
    except TypeError:
        return None
    m = tile_outputs(taps, c_in, c_out, int(attrs.groups))
    if m is None:
        return None
    return dict(
        channels_in=c_in,
        channels_out=c_out,
        taps=taps,
        dilation=int(attrs.dilation[0]),
        pad_left=int(attrs.padding[0]),
        m=m,
    )


def call_with(bb, call, sizes: dict[str, int], bias=None, residual=None):
    """``call`` (a conv ``sizes_of`` took), plus ``bias`` ``[1, O, 1]`` and then ``residual``
    (its shape) where given, as one call of ``kernel`` on its weights' transform; the kernel is
    added to ``bb``'s module once per shape and epilogue."""
    from tvm import relax

    x, w = call.args
    sizes = dict(sizes, bias=int(bias is not None), residual=int(residual is not None))
    c_in, c_out, taps, d = (sizes[k] for k in ("channels_in", "channels_out", "taps", "dilation"))
    suffix = "_bias" * sizes["bias"] + "_res" * sizes["residual"]
    gv = (
        find_made(bb.get(), MAKER_NAME, **sizes)  # one kernel per shape in a module
        or bb.add_func(
            kernel_for(*MADE_FOR, **sizes), f"{MAKER_NAME}_{c_in}x{c_out}_k{taps}_d{d}{suffix}"
        )
    )
    args = [x, weight_transform(bb, w, sizes["m"]), *(a for a in (bias, residual) if a is not None)]
    return relax.call_tir(gv, args, relax.TensorType(call.ty.shape, "float32"))


def conv1d(bb, call):
    """``relax.nn.conv1d`` (stride 1, NCW/OIW, float32) as a call to ``kernel`` on its weights'
    transform, or None where ``tile_outputs`` keeps it direct."""
    sizes = sizes_of(call)
    return None if sizes is None else call_with(bb, call, sizes)
