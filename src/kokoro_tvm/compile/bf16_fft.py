"""Convolutions through real FFTs with bf16 products (``compile.bf16``): the generator's.

Winograd's transforms amplify bf16 rounding with their points' powers; a Fourier transform is
orthogonal and amplifies none, so a long kernel keeps a long tile: overlap-save with ``N``-point
FFTs computes ``N - r + 1`` outputs of a tile from ``N/2`` complex products per channel pair, 4
real multiplications each (22 outputs of an 11-tap conv with 64 bf16 multiplications at ``N = 32``,
where float32 Winograd's F(4, 11) takes 77 float32 ones; 30 outputs of a 3-tap one, where F(6, 3)
takes 40), and its error is a direct bf16 conv's (docs/precision.md).

A complex product fits ``vdpbf16ps``'s pairs: with ``X = a + ib`` (a tile's transform) and
``W = p + iq`` (the weights'), the correlation's ``X conj(W)`` is ``(a, b).(p, q)`` real and
``(a, b).(-q, p)`` imaginary, so the activation pair is one bin ``(a, b)`` against two weight
pairs; the real bins 0 and ``N/2`` share a slot, ``(X_0, X_N/2)`` against ``(W_0, 0)`` and
``(0, W_N/2)``. The weights keep one pair per bin, ``(p, q)`` (``pack_weights``), and the kernel
makes ``(-q, p)`` from it in registers (``_rotated``: a rotate and a sign flip per channel,
beside its ``2 * ROWS`` dot products), so they take half the memory; slot 0's second pair,
``(0, W_N/2)``, is kept as one slot more.

Per parallel block of tiles: gather its input (as ``compile.winograd.kernel``), each tile's real
FFT (vectors along the tiles; every butterfly a ``Bind``, so that no subexpression is computed
twice), one complex GEMM per slot into ``rows x 16`` real and imaginary accumulators, then per
tile the inverse FFT (vectors along the output channels) and the outputs.

The input arrives in bf16 (``input_bf16``): the library rounds it before the call
(``bf16.rounded_bits``), which ``FuseOps`` fuses into the Snake kernel that computes it, so that
kernel, memory-bound, writes half the bytes; the gather widens each value back to float32 as it
transposes it. That adds one more rounding to the spectra's (docs/measurements.md, "bf16
convolutions").

The output may leave in bf16 too (``output_bf16``), each value rounded as it is transposed out:
a conv whose output an instance norm alone reads (``conv_epilogue``: each generator resblock
pair's first conv) then keeps half the bytes live at the decoder's memory peak.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import bf16
from . import bf16_amx as _amx
from .hand_written import FLOPS, made_by

#: FFT points per tile.
POINTS = 32
#: Tiles per register tile and vectors of 16 output channels: 2 x 12 accumulators (real and
#: imaginary), 2 weight vectors and a broadcast of the 32 registers. One vector of channels keeps a
#: slot's weight panel and a channel tile's products small; 4 x 2 and 6 x 2 ran slower, and 8, 10,
#: 14 and 16 rows too (docs/measurements.md, "bf16 convolutions").
ROWS = 12
VECTORS = 1
#: Tiles a block holds a multiple of: 16 tiles' inputs are one transpose.
QUAD = 16
#: A parallel block's transformed input, at most. A block streams every weight once, so larger
#: blocks read them less often; past the L2 cache's size the spectra fall out of it.
BLOCK_BYTES = 768 * 1024
#: Fewer blocks than this, odd in number, are each split into two tasks of half the output
#: channels, each transforming the block's input again: an odd count leaves a thread idle for a
#: block's time, which at a short input is much of the call (docs/measurements.md, "bf16
#: convolutions").
SPLIT_BELOW = 8
MAKER_NAME = bf16.MAKERS[0]

Complex = tuple[Any, Any]


def _times(z: Complex, w: complex, scale: Callable) -> Complex:
    """``z * w`` for a constant ``w``: ``(a + ib)(c + id) = (ac - bd) + i(ad + bc)``, its zero
    terms left out and its unit ones added or subtracted."""
    a, b = z

    def total(terms: list[tuple[Any, float]]):
        out = None
        for value, k in terms:
            if abs(k) < 1e-15:
                continue
            if abs(abs(k) - 1) < 1e-15:
                out = (
                    (value if k > 0 else -value)
                    if out is None
                    else (out + value if k > 0 else out - value)
                )
            else:
                out = scale(value, k) if out is None else out + scale(value, k)
        return out

    return total([(a, w.real), (b, -w.imag)]), total([(a, w.imag), (b, w.real)])


def fft(z: list[Complex], sign: int, scale: Callable, bind: Callable) -> list[Complex]:
    """The complex DFT (``sign`` -1) or its unscaled inverse (+1) of ``len(z) = 2^k`` values,
    radix 2 in time; ``bind`` names each butterfly's outputs."""
    n = len(z)
    if n == 1:
        return list(z)
    even, odd = fft(z[0::2], sign, scale, bind), fft(z[1::2], sign, scale, bind)
    out: list[Complex] = [(None, None)] * n
    for k in range(n // 2):
        t = bind(_times(odd[k], cmath.exp(sign * 2j * math.pi * k / n), scale))
        out[k] = bind((even[k][0] + t[0], even[k][1] + t[1]))
        out[k + n // 2] = bind((even[k][0] - t[0], even[k][1] - t[1]))
    return out


def rfft(x: list, scale: Callable, bind: Callable) -> list[Complex]:
    """``X[k]``, ``k = 0 .. n/2``, of ``n`` real values (the imaginary parts of ``X[0]`` and
    ``X[n/2]`` are None): one complex FFT of ``n/2`` points on the even and odd values."""
    n, h = len(x), len(x) // 2
    z = fft([bind((x[2 * i], x[2 * i + 1])) for i in range(h)], -1, scale, bind)
    out: list[Complex] = [(z[0][0] + z[0][1], None)]
    for k in range(1, h):
        zk, zc = z[k], z[h - k]
        even = (scale(zk[0] + zc[0], 0.5), scale(zk[1] - zc[1], 0.5))
        odd = (scale(zk[1] + zc[1], 0.5), scale(zk[0] - zc[0], -0.5))
        t = _times(odd, cmath.exp(-2j * math.pi * k / n), scale)
        out.append((even[0] + t[0], even[1] + t[1]))
    out.append((z[0][0] - z[0][1], None))
    return out


def irfft(y: list[Complex], n: int, scale: Callable, bind: Callable, outputs: int) -> list:
    """The first ``outputs`` of the ``n`` real values whose ``rfft`` is ``y`` (numpy's
    ``irfft``)."""
    h = n // 2
    z = [bind((scale(y[0][0] + y[h][0], 0.5), scale(y[0][0] - y[h][0], 0.5)))]
    for k in range(1, h):
        yk, yc = y[k], y[h - k]
        even = (scale(yk[0] + yc[0], 0.5), scale(yk[1] - yc[1], 0.5))
        diff = (scale(yk[0] - yc[0], 0.5), scale(yk[1] + yc[1], 0.5))
        odd = _times(diff, cmath.exp(2j * math.pi * k / n), scale)
        z.append(bind((even[0] - odd[1], even[1] + odd[0])))
    values = fft(z, +1, scale, bind)
    flat = [scale(part, 1 / h) for value in values for part in value]
    return flat[:outputs]


def _starts(count: int, width: int) -> list[int]:
    """Starts of ``width``-wide windows covering ``range(count)``, the last one flush with its
    end."""
    return sorted({*range(0, count - width + 1, width), count - width})


def slots(n: int) -> int:
    return n // 2


def pack_weights(w: np.ndarray, n: int = POINTS) -> np.ndarray:
    """``w [O, C, r]`` -> ``[n/2 + 1, C, O]`` bf16 pairs (``uint32``): per slot and input channel,
    the pair that gives the real part of ``X conj(W)``, ``(Re W_k, Im W_k)``, ``(W_0, 0)`` in
    slot 0; then slot 0's imaginary one, ``(0, W_n/2)`` (the kernel makes the others)."""
    spectrum = np.fft.rfft(w.astype(np.float64), n=n, axis=-1).transpose(2, 1, 0)  # bin, C, O
    h = slots(n)
    re, im = spectrum.real.astype(np.float32), spectrum.imag.astype(np.float32)
    zero = np.zeros_like(re[0])
    out = np.empty((h + 1, w.shape[1], w.shape[0]), np.uint32)
    out[0] = bf16.pack_pairs(re[0], zero)
    out[1:h] = bf16.pack_pairs(re[1:h], im[1:h])
    out[h] = bf16.pack_pairs(zero, re[h])
    return out


def _rotated(pair):
    """``(-q, p)`` of the ``uint32`` bf16 pair(s) ``(p, q)``: the halves swapped and the low one's
    sign flipped, which is exact (bf16 rounding is symmetric in the sign)."""
    u32 = bf16.u32
    return ((pair << u32(16)) | (pair >> u32(16))) ^ u32(0x8000)


def weight_transform(bb, w, n: int = POINTS):
    """``pack_weights`` as Relax ops on the parameter ``w`` (lifted to load time): the spectrum
    as two float32 matmuls with the DFT's cosines and sines, its pairs rounded to bf16."""
    from tvm import relax, te, tirx

    o, c, r = (int(v) for v in w.ty.shape)
    h = slots(n)
    angle = 2 * np.pi * np.outer(np.arange(r), np.arange(h + 1)) / n
    flat = bb.emit(relax.op.reshape(w, [o * c, r]))
    re, im = (
        bb.emit(
            relax.op.reshape(
                relax.op.matmul(flat, relax.const(basis.astype(np.float32))), [o, c, h + 1]
            )
        )
        for basis in (np.cos(angle), -np.sin(angle))
    )
    zero = tirx.const(0.0, "float32")

    def packed(re, im):
        def pair(k, cc, oo):  # re[.., 0] is W_0 and re[.., h] is W_n/2: slot 0's two pairs
            lo = tirx.Select(k == h, zero, re[oo, cc, k])
            hi = tirx.Select(k == 0, zero, tirx.Select(k == h, re[oo, cc, h], im[oo, cc, k]))
            return bf16.pairs(lo, hi)

        return te.compute((h + 1, c, o), pair, name="bf16_pairs")

    return bb.emit_te(packed, re, im, primfunc_name_hint="bf16_fft_weights")


def block_tiles(channels_in: int, dilation: int, n: int = POINTS, copies: int = 1) -> int:
    """Tiles of each of a block's ``dilation`` phases: the most whole transposes (``QUAD``) whose
    spectra (``copies`` of them) fit ``BLOCK_BYTES``, at least one. A block computes
    ``dilation * (n - taps + 1)`` outputs per tile."""
    return QUAD * max(1, BLOCK_BYTES // (4 * copies * slots(n) * channels_in * dilation * QUAD))


def kernel_for(**sizes: int):
    """``kernel`` marked with its maker (``hand_written.made_by``): one per shape in a module."""
    return made_by(kernel(**sizes), MAKER_NAME, **sizes)


def kernel(
    channels_in: int,
    channels_out: int,
    taps: int,
    dilation: int,
    pad_left: int,
    bias: int = 0,
    residual: int = 0,
    n: int = POINTS,
    rows: int = ROWS,
    vectors: int = VECTORS,
    split_below: int = SPLIT_BELOW,
    input_bf16: int = 0,
    amx: int = 0,
    output_bf16: int = 0,
    inplace: int = 0,
):
    """TIR kernel ``(x [1, C, L], w [n/2 + 1, C, O] uint32) -> y [1, O, W]`` (``x`` float32, or
    bf16 bits as ``uint16`` with ``input_bf16``; ``y`` float32, or with ``output_bf16`` each
    output rounded to bf16 as it is stored, as ``uint16``) for any ``L`` and ``W``: the conv
    ``y[o, t] = sum_{c, k} w[o, c, k] xpad[c, t + d k]`` with ``xpad`` zero outside
    ``[pad_left, pad_left + L)``, by overlap-save ``n``-point FFTs on ``pack_weights``' pairs.
    With ``bias``, an argument ``b [1, O, 1]`` after ``w``; with ``residual``, one ``r [1, O, W]``
    after that: ``y = (conv + b) + r``, rounded as the separate adds round, added while the
    outputs are in registers or cache (``conv_epilogue``: each add was one more pass over memory).
    With ``residual`` and ``inplace``, there is no ``y``: the outputs overwrite ``r``, each after
    the one read of it that it adds (``relax.call_tir_inplace``).

    Tile ``(p, q)`` of a block holds outputs ``t0 + p + d (i + m q)``, ``i < m = n - taps + 1``,
    and reads inputs ``t0 + p + d v``, ``v < n`` (as ``compile.winograd.kernel``'s tiles): the
    ``d`` tiles of one ``q`` read ``d n`` consecutive inputs and write ``d m`` consecutive outputs.
    Blocks read those runs of 16 ``q`` and write them through 16 x 16 transposes in registers
    (``bf16.transpose16``: vectors along the tiles, then along the output channels); the edge
    blocks read from a zero-padded copy of each input row and write into a block of outputs
    copied up to ``W``.

    The parallel tasks are the blocks, or, for an odd count below ``split_below``, each block's
    two halves of the output channel tiles, half by half: a thread's consecutive tasks cover
    every block.

    With ``amx``, the weights are ``amx_pairs``' ``[n/2, 2, O, C]`` and each slot's GEMM runs on
    AMX tiles (``_amx``) instead of ``vdpbf16ps``."""
    from tvm import tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.tirx.script.builder import ir as T

    c_in, c_out, d = channels_in, channels_out, dilation
    lanes = bf16.LANES
    if amx:  # product tiles of 16 tiles x 16 output channels, side by side
        rows, vectors = lanes, _amx.side_by_side(c_in, c_out)
        if c_in % lanes:
            raise ValueError(f"an AMX FFT conv needs input channels in 16s, not {c_in}")
    channels = vectors * lanes
    m = n - taps + 1
    h = slots(n)
    if m < lanes or n % lanes or n & (n - 1) or c_out % channels:
        raise ValueError(f"an FFT conv {c_in} -> {c_out}, {taps} taps in {n} points")
    q_tiles = block_tiles(c_in, d, n, copies=2 if amx else 1)
    tiles = d * q_tiles
    padded = -(-tiles // rows) * rows  # whole register tiles; the GEMM's extra tiles are zeros
    span = d * m * q_tiles
    reach = d * (m * (q_tiles - 1) + n)  # inputs a block reads
    f32 = T.float32

    def scale(value, k: float):
        return value * f32(k)

    def bind(z: Complex) -> Complex:
        return tuple(None if part is None else T.bind(part) for part in z)

    def store_spectrum(tile: list, c, at):
        spectrum = rfft(tile, scale, bind)
        T.buffer_store(spectra, bf16.pairs(spectrum[0][0], spectrum[h][0]), [0, c, at])
        for k in range(1, h):
            T.buffer_store(spectra, bf16.pairs(*spectrum[k]), [k, c, at])

    def inverse(tile, o):
        bins = [(products[tile, 0, 0, o], f32(0))]
        bins += [(products[tile, k, 0, o], products[tile, k, 1, o]) for k in range(1, h)]
        bins += [(products[tile, 0, 1, o], f32(0))]
        return irfft([bind(b) for b in bins], n, scale, bind, m)

    with IRBuilder() as ib:
        with T.prim_func(private=True):
            length, width = T.int64(), T.int64()
            x = T.match_buffer(
                T.arg("x", T.handle()), (1, c_in, length), "uint16" if input_bf16 else "float32"
            )
            w = T.match_buffer(T.arg("w", T.handle()), (h + 1, c_in, c_out), "uint32")
            if bias:
                b = T.match_buffer(T.arg("b", T.handle()), (1, c_out, 1), "float32")
            if residual:
                r = T.match_buffer(T.arg("r", T.handle()), (1, c_out, width), "float32")
            if residual and inplace:
                y = r
            else:
                dtype = "uint16" if output_bf16 else "float32"
                y = T.match_buffer(T.arg("y", T.handle()), (1, c_out, width), dtype)
            blocks = (width + span - 1) // span
            T.func_attr({"tirx.noalias": True, FLOPS: 8 * h * c_in * c_out * tiles * blocks})
            out_tiles = c_out // channels
            groups = tirx.const(1, "int64")  # tasks per block
            if out_tiles % 2 == 0:
                last = width - (blocks - 1) * span  # outputs in the last block
                # a last block under half full is mostly skipped (``need``) where tiles of one
                # phase are consecutive (no dilation): its halves then balance the threads
                short = 2 * last < span if d == 1 else False
                odd = tirx.all(blocks < split_below, tirx.any(blocks % 2 == 1, short))
                groups = tirx.Select(odd, tirx.const(2, "int64"), groups)
            with bf16.helpers(T), T.parallel(0, blocks * groups) as task:
                blk = T.bind(task % blocks)
                share = T.bind(out_tiles // groups)
                group = T.bind(task // blocks)
                t0 = blk * span
                first = t0 - pad_left
                # tiles per phase holding outputs below W: all but in the last block
                need = T.bind(T.min(q_tiles, (width - t0 + d * m - 1) // (d * m)))
                # with AMX, the spectra of 16 input channels at a time, then transposed into
                # rows of tiles (``_amx.transpose``)
                spectra = T.alloc_buffer((h, lanes if amx else c_in, padded), "uint32")
                if amx:
                    by_tile = T.alloc_buffer((2, h, padded, c_in), "uint32")
                if padded > tiles:
                    with T.grid(h, c_in, padded - tiles) as (k, c, e):
                        T.buffer_store(spectra, tirx.const(0, "uint32"), [k, c, tiles + e])
                # a tile's bins together: its inverse reads them all (bins a page apart thrashed L1)
                products = T.alloc_buffer((padded, h, 2, channels), "float32")
                acc = T.alloc_buffer((2, rows, channels), "float32", scope="local")
                run = T.alloc_buffer((d * max(n, m), lanes), "float32", scope="local")
                if residual:
                    added = T.alloc_buffer((d * m, lanes), "float32", scope="local")
                edge_in = T.alloc_buffer((reach,), "float32")
                edge_out = T.alloc_buffer((channels, span), "float32")
                if amx:
                    _amx.configure(T)

                def gather(edge: bool):  # 16 runs of d n inputs, transposed: vectors along q
                    with T.serial(0, c_in // lanes if amx else c_in) as cg:
                        if amx:
                            gather_channels(edge, cg)
                            _amx.transpose(T, spectra, by_tile, cg)
                        else:
                            gather_channel(edge, cg, cg)

                def gather_channel(edge: bool, c, into):  # input channel c: spectra[:, into]
                    if edge:  # the channel's inputs, zero outside [0, L)
                        with T.serial(0, reach) as s_:
                            T.buffer_store(edge_in, f32(0), [s_])
                        lo = T.max(-first, 0)
                        with T.serial(0, T.max(T.min(first + reach, length) - first - lo, 0)) as s_:
                            value = x[0, c, first + lo + s_]
                            if input_bf16:
                                value = bf16.widened(value)
                            T.buffer_store(edge_in, value, [lo + s_])
                    with T.serial(0, (need + lanes - 1) // lanes) as qc:
                        src = d * m * lanes * qc
                        for u0 in _starts(d * n, lanes):
                            row = edge_in[src + u0] if edge else x[0, c, first + src + u0]
                            widen = bool(input_bf16) and not edge
                            bf16.transpose16(T, row, d * m, run[u0, 0], lanes, widen)
                        with T.serial(0, d) as p:
                            with T.vectorized(0, lanes) as ql:
                                tile = [run[p + d * v, ql] for v in range(n)]
                                store_spectrum(tile, into, p * q_tiles + qc * lanes + ql)

                def gather_channels(edge: bool, cg):
                    with T.serial(0, lanes) as cl:
                        gather_channel(edge, cg * lanes + cl, cl)

                def scatter(ot, edge: bool):  # d m outputs of 16 channels into y's rows
                    with T.grid(need, vectors) as (q, vec):
                        o0 = ot * channels + vec * lanes
                        with T.serial(0, d) as p:
                            with T.vectorized(0, lanes) as ol:
                                values = inverse(p * q_tiles + q, vec * lanes + ol)
                                if bias:  # the last product, x 1/h, is exact (h a power of 2),
                                    # so an FMA LLVM contracts it into rounds as the lone add
                                    shift = T.bind(b[0, o0 + ol, 0])
                                    values = [value + shift for value in values]
                                for i in range(m):
                                    T.buffer_store(run, values[i], [p + d * i, ol])
                        if residual and not edge:  # r's rows transposed as run's, then added
                            t1 = t0 + d * m * q
                            for u0 in _starts(d * m, lanes):
                                bf16.transpose16(T, r[0, o0, t1 + u0], width, added[u0, 0], lanes)
                            with T.serial(0, d * m) as s_:
                                with T.vectorized(0, lanes) as ol:
                                    T.buffer_store(run, run[s_, ol] + added[s_, ol], [s_, ol])
                        for u0 in _starts(d * m, lanes):
                            if edge:
                                at, stride = edge_out[vec * lanes, d * m * q + u0], span
                            else:
                                at, stride = y[0, o0, t0 + d * m * q + u0], width
                            narrow = bool(output_bf16) and not edge
                            bf16.transpose16(T, run[u0, 0], lanes, at, stride, bf16_out=narrow)
                    if edge:  # the last block: outputs past W are not stored
                        with T.grid(channels, T.min(span, width - t0)) as (c_, s_):
                            o, t = ot * channels + c_, t0 + s_
                            out = edge_out[c_, s_] + r[0, o, t] if residual else edge_out[c_, s_]
                            T.buffer_store(y, bf16.stored(out) if output_bf16 else out, [0, o, t])

                def either(condition, fast, slow):
                    """``fast()`` where ``condition`` holds, else ``slow()``."""
                    with T.If(condition):
                        with T.Then():
                            fast()
                        with T.Else():
                            slow()

                either(
                    tirx.all(first >= 0, first + reach <= length),
                    lambda: gather(edge=False),
                    lambda: gather(edge=True),
                )

                def products_of(ot, slot, jt, zeroth: bool):  # one slot's complex GEMM
                    with T.serial(0, c_in) as c:
                        weights = []  # per vector of channels, its (real, imaginary) pairs
                        for vec in range(vectors):
                            o = T.Ramp(ot * channels + vec * lanes, 1, lanes)
                            real = T.bind(w[slot, c, o])
                            weights.append((real, T.bind(w[h, c, o] if zeroth else _rotated(real))))
                        with T.unroll(0, rows) as rr:
                            wide = T.Broadcast(spectra[slot, c, jt * rows + rr], lanes)
                            for part in range(2):
                                for vec in range(vectors):
                                    ramp = T.Ramp(vec * lanes, 1, lanes)
                                    T.buffer_store(
                                        acc,
                                        bf16.dot(T, acc[part, rr, ramp], weights[vec][part], wide),
                                        [part, rr, ramp],
                                    )

                with T.serial(group * share, group * share + share) as ot:
                    with T.grid(h, padded // rows) as (slot, jt):
                        # a register tile wholly past the last block's outputs is not computed
                        q0 = (jt * rows) % q_tiles
                        wanted = tirx.any(q0 < need, q0 + rows > q_tiles)
                        with T.If(tirx.all(wanted, jt * rows < tiles)):
                            with T.Then():
                                if amx:
                                    _amx.products(T, w, by_tile, products, ot, slot, jt)
                                else:
                                    with T.grid(2, rows) as (part, rr):
                                        with T.vectorized(0, channels) as oo:
                                            T.buffer_store(acc, f32(0), [part, rr, oo])
                                    either(
                                        slot == 0,
                                        lambda: products_of(ot, slot, jt, zeroth=True),
                                        lambda: products_of(ot, slot, jt, zeroth=False),
                                    )
                                    with T.grid(2, rows) as (part, rr):
                                        with T.vectorized(0, channels) as oo:
                                            at = [jt * rows + rr, slot, part, oo]
                                            T.buffer_store(products, acc[part, rr, oo], at)
                    either(
                        t0 + span <= width,
                        lambda: scatter(ot, edge=False),
                        lambda: scatter(ot, edge=True),
                    )
                if amx:
                    _amx.release(T)
    return ib.get()
