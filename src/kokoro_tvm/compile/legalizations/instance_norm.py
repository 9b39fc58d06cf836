"""``relax.nn.instance_norm`` with a two-pass variance that stores no full-size temporary."""

from __future__ import annotations


def instance_norm_two_pass(bb, call, bits=None):
    """``nn.instance_norm`` with the variance of the centred values. TOPI's (TVM 0.27) takes one
    pass, ``E[x^2] - E[x]^2`` in float32, which cancels on long axes: a bounded decoder (kokoro's
    own ``InstanceNorm1d``; padded graphs use ``lengths.Padded.instance_norm``, two passes
    already) missed validation at 1024 frames (docs/measurements.md, "Centred instance-norm
    variance").

    Over the last axis (every norm of kokoro's AdaIN, batch one) the mean, the variance of the
    centred values and ``(x - mean) * rsqrt(var + eps)`` are one TE function (``normalized``):
    ``FuseOps`` merges the affine, AdaIN's scale and shift and the Snake after it into that
    kernel, and the schedule rule ``rows`` computes each row's statistics and then the row, while
    the row is in cache. As separate Relax ops the mean was a kernel of its own and the variance
    a reduction of its own inside the next one: three reads of ``x`` from memory, at the
    generator's widest 128 x 120m samples, where one does.

    ``bits``: ``x`` rounded to bf16, as ``uint16`` (an FFT conv's output, ``conv_epilogue``),
    which the kernel reads in its place and widens as it reads it; only a norm that
    ``over_rows`` takes.
    """
    from tvm import relax

    x, gamma, beta = call.args
    attrs = call.attrs
    ndim = len(x.ty.shape)
    axes = sorted(int(a) % ndim for a in attrs.axes)
    eps = relax.const(float(attrs.epsilon), str(x.ty.dtype))
    if bits is not None and not over_rows(call):
        raise ValueError("an instance norm of bf16 bits must be over the last axis")
    if over_rows(call):
        out = bb.emit_te(
            normalized,
            x if bits is None else bits,
            float(attrs.epsilon),
            primfunc_name_hint="normalized",
            primfunc_attrs={"op_pattern": OUT_ELEMWISE_FUSABLE},
        )
    else:  # not kokoro's: the same arithmetic as plain Relax ops
        mean = relax.op.mean(x, axis=axes, keepdims=True)
        centred = relax.op.subtract(x, mean)
        var = relax.op.mean(relax.op.multiply(centred, centred), axis=axes, keepdims=True)
        out = relax.op.multiply(centred, relax.op.rsqrt(relax.op.add(var, eps)))
    channel = int(attrs.channel_axis)
    per_channel = [1 if i != channel else -1 for i in range(ndim)]
    if attrs.scale:
        out = relax.op.multiply(out, relax.op.reshape(gamma, per_channel))
    if attrs.center:
        out = relax.op.add(out, relax.op.reshape(beta, per_channel))
    return out


#: ``relax.analysis`` OpPatternKind of a kernel whose output takes elementwise epilogues. TVM
#: 0.27's ``AnnotateTIROpPattern`` calls ``normalized`` opaque (a partial sum reads
#: ``x[j * PARTS + p]``, an index it does not classify), and ``FuseOps`` then left AdaIN's scale
#: and shift and the Snake a kernel of their own, another pass over memory; the pass keeps a
#: pattern already set (``emit_te``'s ``primfunc_attrs``).
OUT_ELEMWISE_FUSABLE = 4


def over_rows(call) -> bool:
    """The instance norm ``call`` reduces over the last axis alone, up to axes of extent 1 (the
    Relax importer gives ``InstanceNorm1d`` axes ``[0, 2]``, which on a batch of one is the width
    alone): ``normalized`` computes it."""
    from tvm import tirx

    x = call.args[0]
    ndim = len(x.ty.shape)
    axes = sorted(int(a) % ndim for a in call.attrs.axes)
    return (
        bool(axes)
        and axes[-1] == ndim - 1
        and all(
            isinstance(x.ty.shape[a], tirx.IntImm) and int(x.ty.shape[a]) == 1 for a in axes[:-1]
        )
    )


#: Partial sums per row: ``x[k]`` goes to sum ``k % PARTS``, as the reduction rule's rfactor
#: splits an AVX-512 row (4 vectors of 16 lanes: independent add chains hide the add latency), so
#: on AVX-512 these kernels sum in the order the separate mean kernel did; a multiple of every
#: target's lanes.
PARTS = 64
#: The partial-sum blocks' name suffix: what ``schedule/rows.py`` recognizes this construction by.
PARTS_BLOCK = "_parts"


def row_sum(x, value, name: str, dtype: str = ""):
    """TE: ``sum(value(row, k))`` over the last axis, ``[.., 1]``, in ``PARTS`` partial sums
    (``k = j * PARTS + p``; the last, partial, group added to the first ``width % PARTS``) and
    then across them. The split is written out, not left to a schedule's rfactor: TVM 0.27's
    ``compute_at`` drops the predicate of a split whose extent does not divide (the generator's
    120m + 1 samples), and these sums run inside each row's loop (``schedule/rows.py``). Below
    ``PARTS`` samples there is no whole group: the partial sums are then their initialization
    alone, which ``rows`` decomposes out of their (empty) loop; a rule that left TIR's
    ``T.init()`` inside it would leave them unset. ``dtype``: the sums' (``x``'s by default)."""
    from tvm import te, tirx

    *lead, width = x.shape
    whole = tirx.floordiv(width, PARTS)
    j = te.reduce_axis((0, whole), f"{name}_j")
    parts = te.compute(
        (*lead, PARTS),
        lambda *i: te.sum(value(i[:-1], j * PARTS + i[-1]), axis=j),
        name=f"{name}{PARTS_BLOCK}",
    )
    zero = tirx.const(0, dtype or x.dtype)
    last = tirx.floormod(width, PARTS)
    with_tail = te.compute(
        (*lead, PARTS),
        lambda *i: (
            parts(*i) + tirx.if_then_else(i[-1] < last, value(i[:-1], whole * PARTS + i[-1]), zero)
        ),
        name=f"{name}_tail",
    )
    p = te.reduce_axis((0, PARTS), f"{name}_p")
    return te.compute(
        (*lead, 1), lambda *i: te.sum(with_tail(*i[:-1], p), axis=p), name=f"{name}_sum"
    )


def normalized(x, eps: float):
    """TE: ``(x - mean) * rsqrt(var + eps)`` over the last axis, the variance that of the
    centred values (biased, as ``InstanceNorm``), each a sum divided by the length as
    ``relax.op.mean``; ``x`` float32, or bf16 bits (``uint16``) read widened."""
    from tvm import te, tirx

    from .. import bf16

    def value(*i):
        return bf16.widened(x(*i)) if x.dtype == "uint16" else x(*i)

    dtype = "float32" if x.dtype == "uint16" else x.dtype
    *lead, width = x.shape
    length = width.astype(dtype)
    total = row_sum(x, lambda row, k: value(*row, k), "x", dtype)
    mean = te.compute((*lead, 1), lambda *i: total(*i) / length, name="mean")

    def squared(row, k):
        d = value(*row, k) - mean(*row, 0)
        return d * d

    squares = row_sum(x, squared, "sq", dtype)
    var = te.compute((*lead, 1), lambda *i: squares(*i) / length, name="var")
    scale = te.compute(
        (*lead, 1), lambda *i: tirx.rsqrt(var(*i) + tirx.const(eps, dtype)), name="inv_std"
    )
    return te.compute(
        x.shape, lambda *i: (value(*i) - mean(*i[:-1], 0)) * scale(*i[:-1], 0), name="normalized"
    )


LEGALIZATIONS = {"relax.nn.instance_norm": instance_norm_two_pass}
