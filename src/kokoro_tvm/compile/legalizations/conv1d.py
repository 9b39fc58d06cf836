"""``relax.nn.conv1d`` for the conv rule's register tile, or as Winograd's F(m, r).

The generator's stride-1 convs (up to 256 channels, kernels 3, 7, 11) become
``compile.winograd``'s kernel: fewer multiplications than any tile of the direct conv. Strided
convs become stride-1 convs over phase channels; a stride-1 conv whose width and channels both
miss the vector lanes is computed over a lane-multiple width and cropped; a conv over a symbolic
width is computed over whole tiles of its width and of its output channels and cropped (all so
that the conv rule's register tile needs no lane predicate).
"""

from __future__ import annotations

from .. import winograd
from .shapes import const_offset, is_int, lane_span


def conv1d_strided_space_to_depth(bb, call):
    """Strided conv1d (the decoder's F0/N convs, stride 2; CustomSTFT's forward conv, stride hop)
    as a stride-1 conv over ``s`` phase channels: ``X[n, c*s + p, q] = xpad[n, c, q*s + p]``,
    ``W[o, c*s + p, j] = w[o, c, j*s + p]``. A stride-1 conv streams its input with unit stride,
    which the conv rule's register tile needs; the strided form fell back to scalar loops."""
    from tvm import ir, relax

    attrs = call.attrs
    default = ir.Op.get("relax.nn.conv1d").get_attr("FLegalize")
    x, w = call.args
    s = int(attrs.strides[0])
    if s == 1:
        fewer_products = winograd.conv1d(bb, call)
        return _conv1d_lane_padded(bb, call) if fewer_products is None else fewer_products
    if (
        [int(d) for d in attrs.dilation] != [1]
        or int(attrs.groups) != 1
        or attrs.data_layout != "NCW"
        or attrs.kernel_layout != "OIW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
    ):
        return default(bb, call)
    try:
        n, c = int(x.ty.shape[0]), int(x.ty.shape[1])
        o, _, k = (int(v) for v in w.ty.shape)
    except TypeError:
        return default(bb, call)
    length, t_out = x.ty.shape[2], call.ty.shape[2]
    static = is_int(length) and is_int(t_out)
    if static:
        length, t_out = int(length), int(t_out)
    pad_l = int(attrs.padding[0])
    taps = -(-k // s)
    q = t_out + taps - 1
    # symbolic length: the right pad must still be a constant (it is when L = s*n + c)
    right = q * s - length - pad_l if static else const_offset(q * s - length - pad_l)
    if right is None:
        return default(bb, call)
    xp = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, pad_l, max(0, right)]))
    if right < 0:
        xp = bb.emit(
            relax.op.strided_slice(xp, axes=[2], begin=[0], end=[q * s], assume_inbound=True)
        )
    xp = bb.emit(relax.op.reshape(xp, [n, c, q, s]))
    xp = bb.emit(relax.op.permute_dims(xp, [0, 1, 3, 2]))
    xp = bb.emit(relax.op.reshape(xp, [n, c * s, q]))
    wk = w if taps * s == k else bb.emit(relax.op.nn.pad(w, [0, 0, 0, 0, 0, taps * s - k]))
    wk = bb.emit(relax.op.reshape(wk, [o, c, taps, s]))
    wk = bb.emit(relax.op.permute_dims(wk, [0, 1, 3, 2]))
    wk = bb.emit(relax.op.reshape(wk, [o, c * s, taps]))
    return relax.op.nn.conv1d(xp, wk, strides=1, padding=0, data_layout="NCW", kernel_layout="OIW")


def _conv1d_lane_padded(bb, call):
    """A stride-1 conv1d whose output width and output channels both miss the vector lanes
    (conv_post: 22 channels x 120m+1 samples) as a conv over a right-padded input of a width
    that divides by ``WIDTH_SPAN``, then a crop. Without it the register tile needs a lane
    predicate, which LLVM scalarizes (docs/measurements.md, "Lane-padded conv_post")."""
    from tvm import ir, relax

    attrs = call.attrs
    default = ir.Op.get("relax.nn.conv1d").get_attr("FLegalize")
    x, w = call.args
    if (
        attrs.data_layout != "NCW"
        or attrs.kernel_layout != "OIW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
    ):
        return default(bb, call)
    if not is_int(call.ty.shape[2]):
        return _conv1d_symbolic_width(bb, call)
    if [int(d) for d in attrs.dilation] != [1]:
        return default(bb, call)
    try:
        o = int(w.ty.shape[0])
        t_out = int(call.ty.shape[2])
    except TypeError:
        return default(bb, call)
    extra = -t_out % lane_span(t_out)
    if extra == 0 or o % 16 == 0:
        return default(bb, call)
    pad_l, pad_r = int(attrs.padding[0]), int(attrs.padding[-1])
    y = bb.emit(
        relax.op.nn.conv1d(
            x,
            w,
            strides=1,
            padding=(pad_l, pad_r + extra),
            groups=int(attrs.groups),
            data_layout="NCW",
            kernel_layout="OIW",
            out_dtype=str(call.ty.dtype),
        )
    )
    return relax.op.strided_slice(y, axes=[2], begin=[0], end=[t_out])


def _conv1d_symbolic_width(bb, call):
    """A stride-1 conv1d whose output width ``W = a n + b`` is symbolic (a bounded-length export),
    computed over ``a n + b'`` samples (``b`` rounded up to a tile span dividing ``a``; the input
    zero-padded further on the right) and cropped back to ``W``.

    The schedule's register tile splits the width; with a tail the split needs a predicate, and
    TVM 0.27's ``CompactBufferAllocation`` then cannot shrink the ``local`` accumulators to the
    tile: they become a variable-size stack array of a whole row and leave the registers. Over ``a n
    + b'`` every tile is
    whole. Widths with no such span (frame-rate convs, ``n`` or ``2 n``) keep the tail.

    Output channels that are not whole channel tiles (``conv_post``: 22) are padded with zero
    filters to ``CHANNEL_SPAN`` and cropped with the width (``_tile_padded_channels``); where the
    padded conv is one ``compile.winograd`` takes (``conv_post``'s), whose kernel stores only the
    width asked for, the width is left alone and only the filters are padded and cropped.
    """
    from tvm import ir, relax, topi

    attrs = call.attrs
    x, w = call.args
    t_out = call.ty.shape[2]
    padded = _tile_padded_width(t_out)
    channels, c_in, taps = (int(v) for v in w.ty.shape)
    tiled = _tile_padded_channels(channels) if int(attrs.groups) == 1 else channels
    if (
        tiled != channels
        and winograd.tile_outputs(taps, c_in, tiled, int(attrs.groups)) is not None
    ):
        # Winograd's kernel reads any width and pads it itself: only the filters need whole tiles
        w = bb.emit(relax.op.nn.pad(w, [0, tiled - channels, 0, 0, 0, 0]))
        y = bb.emit(
            relax.op.nn.conv1d(
                x,
                w,
                strides=1,
                padding=[int(v) for v in attrs.padding],
                dilation=[int(d) for d in attrs.dilation],
                data_layout="NCW",
                kernel_layout="OIW",
                out_dtype=str(call.ty.dtype),
            )
        )
        return relax.op.strided_slice(y, axes=[1], begin=[0], end=[channels], assume_inbound=True)
    if padded is None and tiled == channels:
        # already whole tiles (the conv emitted below, legalized in turn): TOPI's conv
        return ir.Op.get("relax.nn.conv1d").get_attr("FLegalize")(bb, call)
    extra = 0 if padded is None else padded - t_out
    pad_l, pad_r = int(attrs.padding[0]), int(attrs.padding[-1])
    xp = bb.emit_te(
        topi.nn.pad, x, [0, 0, pad_l], [0, 0, pad_r + extra], primfunc_name_hint="pad_to_tile"
    )
    if tiled != channels:  # a parameter-only pad: the load-time weight transform does it once
        w = bb.emit(relax.op.nn.pad(w, [0, tiled - channels, 0, 0, 0, 0]))
    y = bb.emit(
        relax.op.nn.conv1d(
            xp,
            w,
            strides=1,
            padding=0,
            dilation=[int(d) for d in attrs.dilation],
            groups=int(attrs.groups),
            data_layout="NCW",
            kernel_layout="OIW",
            out_dtype=str(call.ty.dtype),
        )
    )
    return relax.op.strided_slice(
        y, axes=[1, 2], begin=[0, 0], end=[channels, t_out], assume_inbound=True
    )


#: Output channels a bounded conv's channel tiles span on every target: AVX-512's 2 x 16 lanes
#: (AVX2's 16 and NEON's 8 divide it). ``conv_post``'s 22 channels over 120 (n + 1) samples put
#: the vectors along the width instead, where 120 is no multiple of 16: a tail, accumulators out of
#: the registers, and a small fraction of the FMA peak (docs/measurements.md, "Whole channel
#: tiles").
CHANNEL_SPAN = 32
#: Padding to whole channel tiles only where it adds at most this share of FLOPs (not the F0/N
#: projections' single channel).
CHANNEL_PAD_MAX = 1.5


def _tile_padded_channels(channels: int) -> int:
    """``channels`` rounded up to ``CHANNEL_SPAN`` when that costs at most ``CHANNEL_PAD_MAX``x."""
    tiled = -(-channels // CHANNEL_SPAN) * CHANNEL_SPAN
    return tiled if tiled <= CHANNEL_PAD_MAX * channels else channels


#: Tile widths of the conv rule along a conv's width: 5 columns (LONG_TILE, channels in lanes),
#: 1-4 vectors of 8 lanes (AVX2). A width padded to a multiple of one of these spans needs no
#: tail predicate; the largest span dividing the length's coefficient keeps the padded width
#: affine (``a n + b'``), which the schedule's region analysis handles (a floordiv form made
#: ``reverse_compute_at`` of the cropping epilogue fail on derived widths such as ``120 n + 1``).
AFFINE_SPANS = (120, 40, 24, 20, 10, 8, 5)


def _tile_padded_width(t_out):
    """The width a symbolic-width conv is computed over, or None when ``t_out`` needs no padding."""
    import tvm.sym
    from tvm import tirx

    free = list(tirx.analysis.undefined_vars(t_out))
    if len(free) == 1:
        coeffs = tvm.sym.detect_linear_equation(t_out, free)
        if len(coeffs) == 2 and all(isinstance(c, tirx.IntImm) for c in coeffs):
            a, b = int(coeffs[0]), int(coeffs[1])
            span = next((sp for sp in AFFINE_SPANS if a % sp == 0), None)
            if span is not None:
                if b % span == 0:
                    return None
                return t_out + (-b % span)
    # frame-rate widths (n, 2n): no span divides the coefficient, and the floordiv form
    # ceil(W / S) * S made reverse_compute_at of the cropping epilogue fail; these convs keep
    # the partitioned tail (predicated accumulators) instead
    return None


LEGALIZATIONS = {"relax.nn.conv1d": conv1d_strided_space_to_depth}
