"""Our own legalizations (``LegalizeOps(customize_legalize_map=...)``) and the load-time half of
``LiftTransformParams``.

``conv1d_transpose``: TOPI legalizes it as a conv over a zero-dilated input (``stride - 1`` zeros
between samples), so 6-10x of the generator upsamplers' multiply-adds are on zeros. The polyphase
form does only the real work: output sample ``u = m*s + r`` (before cropping ``padding[0]``) is

    y[n, o, m*s + r] = sum_{c, j} x[n, c, m - j] * w[c, o, r + j*s],   j < J = ceil(K / s)

i.e. for every phase ``r`` a dense conv1d over the *undilated* input with the taps ``r, r+s, ...``
of the kernel. All ``s`` phases are one ``relax.nn.conv1d`` with ``s * O`` output channels (weights
rearranged, taps reversed, input padded by ``J - 1`` on the left), then the phases are interleaved
(reshape + permute + reshape) and the padding cropped (strided_slice). Groups (the depthwise
stride-2 upsamplers) keep their channels per group; dilation != 1 or other layouts fall back to
TOPI. The weight rearrangement depends on parameters only, so ``LiftTransformParams`` moves it
into ``main_transform_params``: it runs once, at load time.

The emitted ops are ordinary Relax ops, legalized in turn by ``LegalizeOps``; the conv1d is then a
plain (grouped) conv that the schedule pass's conv rule register-tiles.
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
    right = max(0, need - length)
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
    if pad_l == 0 and l_out == m * s:
        return z
    return relax.op.strided_slice(z, axes=[2], begin=[pad_l], end=[pad_l + l_out])


LEGALIZE_MAP = {"relax.nn.conv1d_transpose": _conv1d_transpose_polyphase}


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
