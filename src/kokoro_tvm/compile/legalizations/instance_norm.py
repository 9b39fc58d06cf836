"""``relax.nn.instance_norm`` with a two-pass variance that stores no full-size temporary."""

from __future__ import annotations


def instance_norm_two_pass(bb, call):
    """``nn.instance_norm`` with the variance of the centred values. TOPI's (TVM 0.27) takes one
    pass, ``E[x^2] - E[x]^2`` in float32, which cancels on long axes: a bounded decoder (kokoro's
    own ``InstanceNorm1d``; padded graphs use ``lengths.Padded.instance_norm``, two passes
    already) missed validation at 1024 frames (docs/measurements.md, "Centred instance-norm
    variance").

    Over the last axis (every norm of kokoro's AdaIN, batch one) the variance is one reduction
    that reads ``x`` and its mean (``centred_var``): written as Relax ops, ``x - mean`` and its
    square were each a full-size tensor, stored and read back, at the generator's widest 128 x
    120m samples, and both were alive beside ``x``. ``FuseOps`` then merges that reduction with
    the normalization after it, ``(x - mean) * rsqrt(var + eps)``, the affine and AdaIN's scale
    and shift, as it merged the Relax form's variance.
    """
    from tvm import relax

    x, gamma, beta = call.args
    attrs = call.attrs
    ndim = len(x.ty.shape)
    axes = sorted(int(a) % ndim for a in attrs.axes)
    mean = relax.op.mean(x, axis=axes, keepdims=True)
    if _over_last_axis(x, axes):
        mean = bb.emit(mean)
        var = bb.emit_te(centred_var, x, mean, primfunc_name_hint="centred_var")
        centred = relax.op.subtract(x, mean)
    else:  # not kokoro's: the same arithmetic as plain Relax ops
        centred = relax.op.subtract(x, mean)
        var = relax.op.mean(relax.op.multiply(centred, centred), axis=axes, keepdims=True)
    eps = relax.const(float(attrs.epsilon), str(x.ty.dtype))
    out = relax.op.multiply(centred, relax.op.rsqrt(relax.op.add(var, eps)))
    channel = int(attrs.channel_axis)
    per_channel = [1 if i != channel else -1 for i in range(ndim)]
    if attrs.scale:
        out = relax.op.multiply(out, relax.op.reshape(gamma, per_channel))
    if attrs.center:
        out = relax.op.add(out, relax.op.reshape(beta, per_channel))
    return out


def _over_last_axis(x, axes: list[int]) -> bool:
    """The reduction is over the last axis alone, up to axes of extent 1: the Relax importer
    gives ``InstanceNorm1d`` axes ``[0, 2]``, which on a batch of one is the width alone."""
    from tvm import tirx

    ndim = len(x.ty.shape)
    return (
        bool(axes)
        and axes[-1] == ndim - 1
        and all(
            isinstance(x.ty.shape[a], tirx.IntImm) and int(x.ty.shape[a]) == 1 for a in axes[:-1]
        )
    )


def centred_var(x, mean):
    """TE: the mean of ``(x - mean)^2`` over the last axis, ``[.., 1]`` (biased, as
    ``InstanceNorm``): a sum divided by the length, as ``relax.op.mean``."""
    from tvm import te

    *lead, width = x.shape
    k = te.reduce_axis((0, width), "k")

    def squared(*i):
        d = x[(*i[:-1], k)] - mean(*i)
        return te.sum(d * d, axis=k)

    total = te.compute((*lead, 1), squared, name="sq_sum")
    return te.compute((*lead, 1), lambda *i: total(*i) / width.astype(x.dtype), name="var")


LEGALIZATIONS = {"relax.nn.instance_norm": instance_norm_two_pass}
