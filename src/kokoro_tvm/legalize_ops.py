"""Our own legalizations (``LegalizeOps(customize_legalize_map=...)``) and the load-time half of
``LiftTransformParams``.

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

from typing import Any, Sequence


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
        n, cin, length = (int(v) for v in xs)
        _, o_g, k = (int(v) for v in ws)
        l_out = int(ys[2])
    except TypeError:  # symbolic shapes: not used by this pipeline
        return _nn_conv1d_transpose(bb, call)
    s = int(attrs.strides[0])
    pad_l = int(attrs.padding[0])
    g = int(attrs.groups)
    c_g = cin // g
    taps = -(-k // s)  # J
    need = -(-(pad_l + l_out) // s)  # output rows m needed (phases interleave to m*s + r)
    # rows up to a lane multiple, so the conv rule tiles the width with full vectors (2m+1 rows
    # left a lane tail: the channel-vectorized fallback ran the upsamplers at 20-50 GFLOP/s)
    m = max(length, need) + -max(length, need) % _lane_span(max(length, need))
    right = m - length

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
    if pad_l == 0 and l_out == m * s:
        return z
    return relax.op.strided_slice(z, axes=[2], begin=[pad_l], end=[pad_l + l_out])


# sin(x) for float32: Cody-Waite reduction by pi (3-part pi, exact products for |x| < 1e5), then an
# odd degree-13 polynomial on [-pi/2, pi/2] (weighted least squares on Chebyshev nodes: relative
# error 2.5e-11 in exact arithmetic, so float32 rounding dominates: a few ulp, as libm).
_INV_PI = 0.31830988618379067
_PI_PARTS = (3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7)
_SIN_POLY = (-0.16666666624906795, 0.0083333310691784263, -0.00019840864022325371,
             2.7525201851583657e-06, -2.3886095813080432e-08)  # coefficients of r^3, r^5, ..., r^13


def sin_poly(x):
    """TE ``sin`` built from vectorizable arithmetic. ``T.sin`` lowers to one libm ``sinf`` call
    per lane (no vector sin in LLVM's default lowering): the generator's Snake activations
    (``x + sin(a*x)^2 / a`` over 128 x 120m samples, 24 times) spent ~10% of the decoder there."""
    from tvm import te, tirx

    def f(*idx):
        v = x(*idx)
        n = tirx.round(v * tirx.const(_INV_PI, "float32"))
        r = v
        for part in _PI_PARTS:
            r = r - n * tirx.const(part, "float32")
        r2 = r * r
        poly = tirx.const(_SIN_POLY[-1], "float32")
        for c in reversed(_SIN_POLY[:-1]):
            poly = poly * r2 + tirx.const(c, "float32")
        s = r + r * r2 * poly
        odd = tirx.Cast("int32", n) % 2 != 0
        return tirx.Select(odd, -s, s)

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
        n, c, length = (int(v) for v in x.ty.shape)
        o, _, k = (int(v) for v in w.ty.shape)
        t_out = int(call.ty.shape[2])
    except TypeError:
        return default(bb, call)
    pad_l = int(attrs.padding[0])
    taps = -(-k // s)
    q = t_out + taps - 1
    right = q * s - length - pad_l
    xp = bb.emit(relax.op.nn.pad(x, [0, 0, 0, 0, pad_l, max(0, right)]))
    if right < 0:
        xp = bb.emit(relax.op.strided_slice(xp, axes=[2], begin=[0], end=[q * s]))
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
    if ([int(d) for d in attrs.dilation] != [1] or attrs.data_layout != "NCW"
            or attrs.kernel_layout != "OIW" or (attrs.out_layout and attrs.out_layout != "NCW")):
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
    try:
        same_shape = [int(d) for d in x.ty.shape] == [int(d) for d in call.ty.shape]
    except TypeError:
        same_shape = False
    if not same_shape:  # a broadcasting exponent: leave it to TOPI
        return default(bb, call)
    out = x
    for _ in range(int(n) - 1):
        out = relax.op.multiply(out, x)
    return out


LEGALIZE_MAP = {"relax.nn.conv1d_transpose": _conv1d_transpose_polyphase, "relax.sin": _sin,
                "relax.nn.conv1d": _conv1d_strided_space_to_depth, "relax.power": _power}


def has_transform_params(vm) -> bool:
    try:
        vm["main_transform_params"]
    except Exception:  # noqa: BLE001  (AttributeError / TVMError by version)
        return False
    return True


def bind_params(vm, weights: Sequence[Any]) -> list:
    """What ``vm["main"]`` takes after its inputs, given the raw weights in signature order.

    Libraries built with ``LiftTransformParams`` carry ``main_transform_params`` (weight
    transposes, LSTM bias sums, weight-norm, conv_transpose kernel rearrangement): run it once
    here and pass its outputs on every call. Weights it passes through unchanged come back as
    the very objects given (so weights shared by several buckets stay shared). Without that
    function (libraries built before it existed), the raw weights are the arguments.
    ``weights``: ``tvm.runtime.Tensor`` or numpy arrays.
    """
    import tvm

    raw = [w if isinstance(w, tvm.runtime.Tensor) else tvm.runtime.tensor(w) for w in weights]
    if not has_transform_params(vm):
        return raw
    out = vm["main_transform_params"](raw)
    by_ptr = {(w.data_ptr(), tuple(w.shape), str(w.dtype)): w for w in raw}
    return [by_ptr.get((t.data_ptr(), tuple(t.shape), str(t.dtype)), t) for t in out]
