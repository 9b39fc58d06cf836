"""``relax.nn.conv1d_transpose`` in polyphase form.

TOPI legalizes it as a conv over a zero-dilated input (``stride - 1`` zeros
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
"""

from __future__ import annotations

from .shapes import const_offset, is_int, lane_span


def conv1d_transpose_polyphase(bb, call):
    from tvm import relax
    from tvm.relax.transform.legalize_ops.nn import _nn_conv1d_transpose

    attrs = call.attrs
    x, w = call.args
    dilation = [int(d) for d in attrs.dilation]
    if (
        dilation != [1]
        or attrs.data_layout != "NCW"
        or attrs.kernel_layout != "IOW"
        or (attrs.out_layout and attrs.out_layout != "NCW")
    ):
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
    if is_int(length) and is_int(l_out):
        length, l_out = int(length), int(l_out)
        need = -(-(pad_l + l_out) // s)  # output rows m needed (phases interleave to m*s + r)
        # rows up to a lane multiple, so the conv rule tiles the width with full vectors (2m+1 rows
        # left a lane tail, and the channel-vectorized fallback ran the upsamplers slowly)
        m = max(length, need) + -max(length, need) % lane_span(max(length, need))
        right = m - length
    else:
        # symbolic length L (bounded-length export): l_out = s*L + c, so the rows needed are
        # L + ceil((pad_l + c) / s), a constant number past L; no lane rounding (the schedule
        # handles the tail of a symbolic width)
        c = const_offset(pad_l + l_out - s * length)
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
    z = bb.emit(
        relax.op.nn.conv1d(
            x,
            wk,
            strides=1,
            padding=(taps - 1, right),
            groups=g,
            data_layout="NCW",
            kernel_layout="OIW",
        )
    )
    # [N, G*s*O_g, M] -> [N, G, O_g, M, s] -> [N, O, M*s] -> crop
    z = bb.emit(relax.op.reshape(z, [n, g, s, o_g, m]))
    z = bb.emit(relax.op.permute_dims(z, [0, 1, 3, 4, 2]))
    z = bb.emit(relax.op.reshape(z, [n, g * o_g, m * s]))
    if isinstance(m, int) and pad_l == 0 and l_out == m * s:
        return z
    # in bounds by construction (m*s >= pad_l + l_out); without the flag a symbolic end infers
    # a clipped min(...) extent
    return relax.op.strided_slice(
        z, axes=[2], begin=[pad_l], end=[pad_l + l_out], assume_inbound=True
    )


LEGALIZATIONS = {"relax.nn.conv1d_transpose": conv1d_transpose_polyphase}
