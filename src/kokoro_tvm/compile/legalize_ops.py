"""Our own legalizations (``LegalizeOps(customize_legalize_map=...)``).

``conv1d_transpose``: TOPI legalizes it as a conv over a zero-dilated input (``stride - 1`` zeros
between samples), so 6-10x of the generator upsamplers' multiply-adds are on zeros. The polyphase
form does only the real work: output sample ``u = m*s + r`` (before cropping ``padding[0]``) is

    y[n, o, m*s + r] = sum_{c, j} x[n, c, m - j] * w[c, o, r + j*s],   j < J = ceil(K / s)

i.e. for every phase ``r`` a dense conv1d over the *undilated* input with the taps ``r, r+s, ...``
of the kernel. All ``s`` phases are one ``relax.nn.conv1d`` with ``s * O`` output channels (weights
rearranged, taps reversed, input padded by ``J - 1`` on the left), then the phases are interleaved
(reshape + permute + reshape) and the padding cropped (strided_slice). The phase rows are
rounded up to a lane multiple, cropped with the padding. Groups (the depthwise
stride-2 upsamplers) keep their channels per group; dilation != 1 or other layouts fall back to
TOPI. The weight rearrangement depends on parameters only, so ``LiftTransformParams`` moves it
into ``main_transform_params``: it runs once, at load time.

The emitted ops are ordinary Relax ops, legalized in turn by ``LegalizeOps``; the conv1d is then a
plain (grouped) conv that the schedule pass's conv rule register-tiles.

``conv1d``: strided convs become stride-1 convs over phase channels, and a stride-1 conv whose
width and channels both miss the vector lanes is computed over a lane-multiple width and cropped
(both so that the conv rule's register tile needs no lane predicate).
"""

from __future__ import annotations

from . import vector_math


def _conv1d_transpose_polyphase(bb, call):
    from tvm import relax
    from tvm.relax.transform.legalize_ops.nn import _nn_conv1d_transpose

    attrs = call.attrs
    x, w = call.args
    dilation = [int(d) for d in attrs.dilation]
    if (dilation != [1] or attrs.data_layout != "NCW" or attrs.kernel_layout != "IOW"
            or (attrs.out_layout and attrs.out_layout != "NCW")):
        return _nn_conv1d_transpose(bb, call)
    xs, ws, ys = x.ty.shape, w.ty.shape, call.ty.shape
    try:
        n, cin = int(xs[0]), int(xs[1])
        _, o_g, k = (int(v) for v in ws)
    except TypeError:
        return _nn_conv1d_transpose(bb, call)
    s = int(attrs.strides[0])
    pad_l = int(attrs.padding[0])
    g = int(attrs.groups)
    c_g = cin // g
    taps = -(-k // s)  # J
    length, l_out = xs[2], ys[2]
    if _is_int(length) and _is_int(l_out):
        length, l_out = int(length), int(l_out)
        need = -(-(pad_l + l_out) // s)  # output rows m needed (phases interleave to m*s + r)
        # rows up to a lane multiple, so the conv rule tiles the width with full vectors (2m+1 rows
        # left a lane tail: the channel-vectorized fallback ran the upsamplers at 20-50 GFLOP/s)
        m = max(length, need) + -max(length, need) % _lane_span(max(length, need))
        right = m - length
    else:
        # symbolic length L (bounded-length export): l_out = s*L + c, so the rows needed are
        # L + ceil((pad_l + c) / s), a constant number past L; no lane rounding (the schedule
        # handles the tail of a symbolic width)
        c = _const_offset(pad_l + l_out - s * length)
        if c is None:
            return _nn_conv1d_transpose(bb, call)
        right = max(0, -(-c // s))
        m = length + right

    # weights [C, O_g, K] -> [G*s*O_g, C_g, J]: channel (g, r, o), taps reversed
    wk = w if taps * s == k else bb.emit(relax.op.nn.pad(w, [0, 0, 0, 0, 0, taps * s - k]))
    wk = bb.emit(relax.op.reshape(wk, [g, c_g, o_g, taps, s]))
    wk = bb.emit(relax.op.permute_dims(wk, [0, 4, 2, 1, 3]))  # [G, s, O_g, C_g, J]
    if taps > 1:
        wk = bb.emit(relax.op.flip(wk, axis=4))
    wk = bb.emit(relax.op.reshape(wk, [g * s * o_g, c_g, taps]))
    z = bb.emit(relax.op.nn.conv1d(x, wk, strides=1, padding=(taps - 1, right), groups=g,
                                   data_layout="NCW", kernel_layout="OIW"))
    # [N, G*s*O_g, M] -> [N, G, O_g, M, s] -> [N, O, M*s] -> crop
    z = bb.emit(relax.op.reshape(z, [n, g, s, o_g, m]))
    z = bb.emit(relax.op.permute_dims(z, [0, 1, 3, 4, 2]))
    z = bb.emit(relax.op.reshape(z, [n, g * o_g, m * s]))
    if isinstance(m, int) and pad_l == 0 and l_out == m * s:
        return z
    # in bounds by construction (m*s >= pad_l + l_out); without the flag a symbolic end infers
    # a clipped min(...) extent
    return relax.op.strided_slice(z, axes=[2], begin=[pad_l], end=[pad_l + l_out], assume_inbound=True)


def _is_int(v) -> bool:
    from tvm import tirx

    return isinstance(v, (int, tirx.IntImm))


def _const_offset(expr) -> int | None:
    """``expr`` simplified to an integer constant, or None (e.g. it still depends on a length)."""
    import tvm.sym
    from tvm import tirx

    v = tvm.sym.Analyzer().simplify(expr)
    return int(v) if isinstance(v, tirx.IntImm) else None


# pi = _PI[0] + _PI[1] + _PI[2] + _PI[3] + O(3.5e-15). The first three have 5 significant bits
# (3.125 = 11.001b, 0.0166015625 = 17 * 2^-10, -9.059906005859375e-06 = -19 * 2^-21), so n * _PI[k]
# is exact in float32 for every integer |n| < 2^19. _PI[3] is the float32 nearest to the rest.
_PI = (3.125, 0.0166015625, -9.059906005859375e-06, 1.5099580252808664e-07)
_INV_PI = 0.3183098861837907  # rounded to float32 by tirx.const
_ROUND_MAGIC_BITS = 0x4B400000  # float32 1.5 * 2^23: t = y + 1.5*2^23 rounds y to an integer
# sin(r) ~ r + r^3 * P(r^2) on |r| <= 1.77: odd, degree 11, float32 coefficients fitted for
# absolute error (Lawson-weighted least squares on Chebyshev nodes, each coefficient rounded to
# float32 before the later ones are refitted). Max |poly - sin| = 4.7e-10 in exact arithmetic.
_SIN_COEFS = (-0.1666666716337204, 0.008333343081176281, -0.0001984172995435074,
              2.7549358492251486e-06, -2.409929322766402e-08)  # r^3, r^5, r^7, r^9, r^11


def sin_poly(x):
    """TE ``sin`` (float32) built from vectorizable arithmetic only. ``T.sin`` lowers to one libm
    ``sinf`` call per lane (no vector sin in LLVM's default lowering): the generator's Snake
    activations (``x + sin(a*x)^2 / a`` over 128 x 120m samples, 24 times) spent ~10% of the decoder
    there. No ``round`` either (LLVM turns it into scalar ``nearbyintf`` calls on SSE2-only
    targets). The sine source takes sin of phases up to ~1e6 rad (the 9th harmonic within a
    minute of audio), hence the accurate reduction below.

    Method:

    1. ``n = nearest integer to x / pi`` by the 1.5*2^23 trick: ``t = x * (1/pi) + 1.5*2^23``
       leaves the integer in t's low mantissa bits; n is read back as
       ``int32(bits(t) - bits(1.5*2^23))`` (uint32 subtraction, never a signed overflow) and
       converted to float32. n's parity is bit 0 of ``bits(t)``. (``t - 1.5*2^23`` in float
       would be folded to ``x * (1/pi)`` by TVM's simplifier.) Because ``x * (1/pi)`` is rounded
       in float32, n can be off by one near half-integers: ``|x/pi - n| <= 0.5 + |x/pi| * 2^-23``,
       i.e. ``|r| <= 1.77`` for |x| <= 1.65e6 (measured: |x/pi - n| <= 0.537, |r| <= 1.69);
       the polynomial is fitted on |r| <= 1.77.
    2. Cody-Waite ``r = x - n*P0 - n*P1 - n*P2 - n*P3`` in float32, left to right. P0..P2 have
       5 significant bits, so for ``|n| < 2^19`` (|x| < 1.647e6) each product ``n*Pk`` is exact,
       and the first three subtractions are exact too (Sterbenz for the first; for the next two
       both operands lie on the grid ``min(ulp(x), ulp(Pk))`` and the differences stay below
       6.5 and 1.9, which needs <= 24 bits). Only the last step rounds. Since those products
       are exact, an FMA computes exactly what the separate multiply and subtract compute: the
       exact steps give the same bits whether or not LLVM contracts, and only the last
       subtraction and the polynomial round differently (both inside the bound below). TVM 0.27
       does contract: ``LowerIntrin`` turns ``a*b + c`` into ``llvm.fmuladd``, and the LLVM
       target is created with ``AllowFPOpFusion = Fast``, which also fuses ``c - a*b`` into
       vfnmadd on FMA targets.
    3. ``sin(x) = (-1)^n * sin(r)``: odd polynomial in r, then the sign bit flipped by XOR with
       ``bits(t) << 31``.

    Error (absolute, against the exact sin of the float32 input), |x| < 1.647e6:
    reduction <= 2^-24 (last subtraction, |r| < 2) + 0.08 * 2^-24 (n*P3 product, non-FMA)
    + 2^19 * 3.5e-15 (pi truncation) ~= 6.6e-8; polynomial 4.7e-10; float32 evaluation of
    ``r + r*r2*P`` <= ~4 ulp of the correction term (<= 0.79) plus half an ulp of the result
    ~= 2.2e-7. A priori bound ~3e-7 < 1e-6. Measured exhaustively over every float32 with
    |x| <= 1.647e6 (benchmarks/sin_accuracy.py --exhaustive): max 1.25e-7 on x86-64-v3 (FMA contracted), 1.20e-7 on
    x86-64 and on the SSE2 baseline; the exactness of the products and of the first three
    subtractions was checked for every such float32 with n from both the fused and the unfused
    rounding step. libm sinf on the same inputs: 3.3e-8.

    Known difference from sinf: sin(-0.0) returns +0.0 (the -0 is lost in ``-0 - n*P2`` with
    ``n*P2 = -0``); harmless here, fixing it costs two more vector ops.

    Outside that range: for |x| up to ~1.3e7 n is still the right integer but the products are
    no longer exact without FMA, so the error grows (bounded, ~|x| * 2^-25); beyond, n is
    garbage. A guard maps any |r| > 2 to ``r * (+-0)``, so every finite input gives a finite
    result of magnitude <= 1 (huge |x| give +-0), while inf (r = inf) and NaN give NaN, as
    sinf does. The zero is ``bits(r) & sign`` rather than a constant because TVM folds
    ``r * 0.0`` to ``0.0``. (The comparison is a float compare; TVM creates the LLVM target with
    ``NoNaNsFPMath``, so it may go either way for NaN, but both branches give NaN then.)
    """
    from tvm import te, tirx

    if str(x.dtype) != "float32":
        raise TypeError(f"sin_poly: float32 only, got {x.dtype}")

    f32 = lambda c: tirx.const(c, "float32")  # noqa: E731
    u32 = lambda c: tirx.const(c, "uint32")  # noqa: E731

    def f(*idx):
        v = x(*idx)
        t = v * f32(_INV_PI) + f32(1.5 * 2.0**23)
        tb = tirx.reinterpret("uint32", t)
        n = tirx.reinterpret("int32", tb - u32(_ROUND_MAGIC_BITS)).astype("float32")
        r = v
        for part in _PI:
            r = r - n * f32(part)
        zero = tirx.reinterpret("float32", tirx.reinterpret("uint32", r) & u32(0x80000000))
        r = tirx.Select(tirx.abs(r) > f32(2.0), r * zero, r)
        r2 = r * r
        poly = f32(_SIN_COEFS[-1])
        for c in reversed(_SIN_COEFS[:-1]):
            poly = poly * r2 + f32(c)
        s = r + r * r2 * poly
        return tirx.reinterpret("float32", tirx.reinterpret("uint32", s) ^ (tb << u32(31)))

    return te.compute(x.shape, f, name="sin_poly")


def _sin(bb, call):
    from tvm import ir

    if str(call.args[0].ty.dtype) != "float32":
        return ir.Op.get("relax.sin").get_attr("FLegalize")(bb, call)
    return bb.call_te(sin_poly, call.args[0], primfunc_name_hint="sin")


def _conv1d_strided_space_to_depth(bb, call):
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
        return _conv1d_lane_padded(bb, call)
    if ([int(d) for d in attrs.dilation] != [1] or int(attrs.groups) != 1
            or attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW"
            or (attrs.out_layout and attrs.out_layout != "NCW")):
        return default(bb, call)
    try:
        n, c = int(x.ty.shape[0]), int(x.ty.shape[1])
        o, _, k = (int(v) for v in w.ty.shape)
    except TypeError:
        return default(bb, call)
    length, t_out = x.ty.shape[2], call.ty.shape[2]
    static = _is_int(length) and _is_int(t_out)
    if static:
        length, t_out = int(length), int(t_out)
    pad_l = int(attrs.padding[0])
    taps = -(-k // s)
    q = t_out + taps - 1
    # symbolic length: the right pad must still be a constant (it is when L = s*n + c)
    right = q * s - length - pad_l if static else _const_offset(q * s - length - pad_l)
    if right is None:
        return default(bb, call)
    xp = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, pad_l, max(0, right)]))
    if right < 0:
        xp = bb.emit(relax.op.strided_slice(xp, axes=[2], begin=[0], end=[q * s], assume_inbound=True))
    xp = bb.emit(relax.op.reshape(xp, [n, c, q, s]))
    xp = bb.emit(relax.op.permute_dims(xp, [0, 1, 3, 2]))
    xp = bb.emit(relax.op.reshape(xp, [n, c * s, q]))
    wk = w if taps * s == k else bb.emit(relax.op.nn.pad(w, [0, 0, 0, 0, 0, taps * s - k]))
    wk = bb.emit(relax.op.reshape(wk, [o, c, taps, s]))
    wk = bb.emit(relax.op.permute_dims(wk, [0, 1, 3, 2]))
    wk = bb.emit(relax.op.reshape(wk, [o, c * s, taps]))
    return relax.op.nn.conv1d(xp, wk, strides=1, padding=0, data_layout="NCW", kernel_layout="OIW")


#: Output widths are padded up to a multiple of this many samples (4 vectors of 16 lanes, the
#: widest register tile) when the channels cannot carry the vector lanes instead.
WIDTH_SPAN = 64


def _lane_span(width: int) -> int:
    """The multiple a padded conv output width is rounded up to: the widest register tile for
    long rows, one vector for short ones (where rounding to 64 would waste more than it saves)."""
    return WIDTH_SPAN if width >= 8 * WIDTH_SPAN else 16


def _conv1d_lane_padded(bb, call):
    """A stride-1 conv1d whose output width and output channels both miss the vector lanes
    (conv_post: 22 channels x 120m+1 samples) as a conv over a right-padded input of a width
    that divides by ``WIDTH_SPAN``, then a crop. Without it the register tile needs a lane
    predicate, which LLVM scalarizes: conv_post ran at 4-6 GFLOP/s, 7-10% of the decoder."""
    from tvm import ir, relax

    attrs = call.attrs
    default = ir.Op.get("relax.nn.conv1d").get_attr("FLegalize")
    x, w = call.args
    if (attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW"
            or (attrs.out_layout and attrs.out_layout != "NCW")):
        return default(bb, call)
    if not _is_int(call.ty.shape[2]):
        return _conv1d_symbolic_width(bb, call)
    if [int(d) for d in attrs.dilation] != [1]:
        return default(bb, call)
    try:
        o = int(w.ty.shape[0])
        t_out = int(call.ty.shape[2])
    except TypeError:
        return default(bb, call)
    extra = -t_out % _lane_span(t_out)
    if extra == 0 or o % 16 == 0:
        return default(bb, call)
    pad_l, pad_r = int(attrs.padding[0]), int(attrs.padding[-1])
    y = bb.emit(relax.op.nn.conv1d(x, w, strides=1, padding=(pad_l, pad_r + extra), groups=int(attrs.groups),
                                   data_layout="NCW", kernel_layout="OIW", out_dtype=str(call.ty.dtype)))
    return relax.op.strided_slice(y, axes=[2], begin=[0], end=[t_out])


def _conv1d_symbolic_width(bb, call):
    """A stride-1 conv1d whose output width ``W = a n + b`` is symbolic (a bounded-length export),
    computed over ``a n + b'`` samples (``b`` rounded up to a tile span dividing ``a``; the input
    zero-padded further on the right) and cropped back to ``W``.

    The schedule's register tile splits the width; with a tail the split needs a predicate, and
    TVM 0.27's ``CompactBufferAllocation`` then cannot shrink the ``local`` accumulators to the
    tile: they become a variable-size stack array of a whole row and leave the registers. Over ``a n + b'`` every tile is
    whole. Widths with no such span (frame-rate convs, ``n`` or ``2 n``) keep the tail.
    """
    from tvm import ir, relax, topi

    attrs = call.attrs
    x, w = call.args
    t_out = call.ty.shape[2]
    padded = _tile_padded_width(t_out)
    if padded is None:
        # already whole tiles (the conv emitted below, legalized in turn): TOPI's conv
        return ir.Op.get("relax.nn.conv1d").get_attr("FLegalize")(bb, call)
    extra = padded - t_out
    pad_l, pad_r = int(attrs.padding[0]), int(attrs.padding[-1])
    xp = bb.emit_te(topi.nn.pad, x, [0, 0, pad_l], [0, 0, pad_r + extra], primfunc_name_hint="pad_to_tile")
    y = bb.emit(relax.op.nn.conv1d(xp, w, strides=1, padding=0, dilation=[int(d) for d in attrs.dilation],
                                   groups=int(attrs.groups), data_layout="NCW", kernel_layout="OIW",
                                   out_dtype=str(call.ty.dtype)))
    return relax.op.strided_slice(y, axes=[2], begin=[0], end=[t_out], assume_inbound=True)


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


def _power(bb, call):
    """``x ** n`` for a constant small integer ``n`` as ``n - 1`` multiplies. TOPI calls libm
    ``powf`` once per lane; ALBERT's tanh GELU (``x + 0.044715 * x**3`` on 64 x 2048 values, 12
    times per duration-64 call) spent ~6% of the duration predictor there."""
    from tvm import ir, relax
    from tvm.ir.expr import Constant

    x, e = call.args
    default = ir.Op.get("relax.power").get_attr("FLegalize")
    if not isinstance(e, Constant) or e.value.numpy().size != 1:
        return default(bb, call)
    n = float(e.value.numpy().reshape(()))
    if n not in (2.0, 3.0, 4.0) or "float" not in str(x.ty.dtype):
        return default(bb, call)
    import tvm.sym

    ana = tvm.sym.Analyzer()
    xs, ys = list(x.ty.shape), list(call.ty.shape)
    same_shape = len(xs) == len(ys) and all(ana.can_prove_equal(a, b) for a, b in zip(xs, ys))
    if not same_shape:  # a broadcasting exponent: leave it to TOPI
        return default(bb, call)
    out = x
    for _ in range(int(n) - 1):
        out = relax.op.multiply(out, x)
    return out


def _instance_norm_two_pass(bb, call):
    """``nn.instance_norm`` with the variance of the centred values. TOPI's (TVM 0.27) takes one
    pass, ``E[x^2] - E[x]^2`` in float32, which cancels on long axes: a bounded decoder (kokoro's
    own ``InstanceNorm1d``; padded graphs use ``masked.instance_norm``, two passes already) missed
    validation at 1024 frames, 37.4 dB log-mel against float32 kokoro's 41.2."""
    from tvm import relax

    x, gamma, beta = call.args
    attrs = call.attrs
    axes = [int(a) for a in attrs.axes]
    centred = relax.op.subtract(x, relax.op.mean(x, axis=axes, keepdims=True))
    var = relax.op.mean(relax.op.multiply(centred, centred), axis=axes, keepdims=True)
    eps = relax.const(float(attrs.epsilon), str(x.ty.dtype))
    out = relax.op.multiply(centred, relax.op.rsqrt(relax.op.add(var, eps)))
    ndim, channel = len(x.ty.shape), int(attrs.channel_axis)
    per_channel = [1 if i != channel else -1 for i in range(ndim)]
    if attrs.scale:
        out = relax.op.multiply(out, relax.op.reshape(gamma, per_channel))
    if attrs.center:
        out = relax.op.add(out, relax.op.reshape(beta, per_channel))
    return out


LEGALIZE_MAP = {"relax.nn.conv1d_transpose": _conv1d_transpose_polyphase, "relax.sin": _sin,
                "relax.nn.conv1d": _conv1d_strided_space_to_depth, "relax.power": _power,
                "relax.nn.instance_norm": _instance_norm_two_pass,
                "relax.exp": vector_math.legalize_exp, "relax.tanh": vector_math.legalize_tanh,
                "relax.sigmoid": vector_math.legalize_sigmoid, "relax.nn.softmax": vector_math.legalize_softmax,
                "relax.nn.gelu_tanh": vector_math.legalize_gelu_tanh}
