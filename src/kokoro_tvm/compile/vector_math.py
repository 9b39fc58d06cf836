"""``exp``, ``tanh`` and ``sigmoid`` (float32) from vectorizable arithmetic, and their
legalizations.

TVM 0.27 lowers ``tir.exp`` to ``llvm.exp``, which LLVM expands to one libm ``expf`` call per lane
(no vector math library is configured), and ``tir.tanh``/``tir.sigmoid`` to expressions of
``tir.exp``: every softmax, tanh-GELU and LSTM gate ran scalar, a visible share of the duration
predictor (docs/measurements.md, "Vector transcendentals"). The expressions here are plain
multiplies, adds, compares and bit operations, which LLVM vectorizes at every target's width.

Used by the Relax legalizations below (``legalizations.LEGALIZE_MAP``) and by the LSTM
recurrence kernel (``lstm_lowering``), which calls them inside its TVMScript.

Accuracy (float32 input, against the exact function of that input), from
``tests/test_vector_math.py`` over a dense grid: ``exp`` <= 2 ulp on [-87, 88]; ``tanh`` <= 4e-7
relative; ``sigmoid`` <= 3e-7 relative for x >= -80. libm is ~0.5 ulp; kokoro's float32 path is
itself ~1e-6 relative from float64 on these components, so this changes nothing measurable.
Range: ``exp`` saturates to [exp(-87), exp(88)] (no 0, no inf; no inputs here come close), so
``sigmoid`` of x < -87 gives ~1.6e-38 instead of 0.
"""

from __future__ import annotations

from . import vector_math64

#: exp clamps its argument to this range: 2^n then stays a normal float32 (n in [-126, 127]).
EXP_LO, EXP_HI = -87.0, 88.0
_LOG2E = 1.4426950408889634
# ln 2 = _LN2_HI + _LN2_LO; _LN2_HI = 355/512 has 9 significant bits, so n * _LN2_HI is exact for
# every |n| <= 127 and x - n * _LN2_HI is exact (Sterbenz) where it matters.
_LN2_HI, _LN2_LO = 0.693359375, -2.1219444005469057e-4
_ROUND_MAGIC = 1.5 * 2.0**23  # y + 1.5*2^23 leaves round(y) in the low mantissa bits
_ROUND_MAGIC_BITS = 0x4B400000
# e^r on |r| <= ln2/2: Taylor to degree 7 (remainder r^8/8! <= 5.3e-9 relative)
_EXP_COEFS = (1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040)
#: below this |x|, tanh takes its odd Taylor series (1 - 2/(e^2x + 1) cancels near 0)
TANH_SMALL = 0.25
# tanh x = x + x^3 * P(x^2), |x| <= 0.25: Taylor through x^13 (remainder < 1e-10 relative)
_TANH_COEFS = (-1 / 3, 2 / 15, -17 / 315, 62 / 2835, -1382 / 155925, 21844 / 6081075)


def _f32(c: float):
    from tvm import tirx

    return tirx.const(c, "float32")


def _check(x) -> None:
    # TVM 0.27: a PrimExpr's type is ``.ty``; loads and TE tensor slices have ``.dtype``
    dtype = str(x.dtype if hasattr(x, "dtype") else x.ty)
    if dtype != "float32":
        raise TypeError(f"vector_math: float32 only, got {dtype}")


def exp(x):
    """e^x as a float32 PrimExpr: ``2^n * e^r`` with ``n = round(x / ln2)`` (the 1.5*2^23 trick,
    no ``round`` call: LLVM turns that into scalar ``nearbyintf`` calls on SSE2-only targets),
    ``r = x - n ln2`` by Cody-Waite, ``e^r`` by Horner and ``2^n`` built in the exponent bits."""
    from tvm import tirx

    _check(x)
    v = tirx.max(tirx.min(x, _f32(EXP_HI)), _f32(EXP_LO))
    t = v * _f32(_LOG2E) + _f32(_ROUND_MAGIC)
    n = tirx.reinterpret(
        "int32", tirx.reinterpret("uint32", t) - tirx.const(_ROUND_MAGIC_BITS, "uint32")
    )
    nf = n.astype("float32")
    r = v - nf * _f32(_LN2_HI) - nf * _f32(_LN2_LO)
    p = _f32(_EXP_COEFS[-1])
    for c in reversed(_EXP_COEFS[:-1]):
        p = p * r + _f32(c)
    scale = tirx.reinterpret("float32", (n + tirx.const(127, "int32")) << tirx.const(23, "int32"))
    return p * scale


def tanh(x):
    """tanh x: the odd Taylor series for ``|x| < TANH_SMALL``, else ``1 - 2 / (e^{2|x|} + 1)``
    with the sign of x (both computed, one selected: no branch in a vector lane)."""
    from tvm import tirx

    _check(x)
    a = tirx.abs(x)
    x2 = x * x
    p = _f32(_TANH_COEFS[-1])
    for c in reversed(_TANH_COEFS[:-1]):
        p = p * x2 + _f32(c)
    small = x + x * x2 * p
    big = _f32(1.0) - _f32(2.0) / (exp(a * _f32(2.0)) + _f32(1.0))
    return tirx.Select(a < _f32(TANH_SMALL), small, tirx.Select(x < _f32(0.0), -big, big))


def sigmoid(x):
    """1 / (1 + e^-x)."""
    _check(x)
    return _f32(1.0) / (_f32(1.0) + exp(-x))


# -- Relax legalizations (``legalizations.LEGALIZE_MAP``) ------------------------------------------


def by_dtype(float32):
    """A legalization that takes ``float32(bb, call)`` for a float32 operand, ``vector_math64``'s
    form for a float64 one, and TVM's own for any other dtype."""

    def legalize(bb, call):
        from tvm import ir

        dtype = str(call.args[0].ty.dtype)
        if dtype == "float64" and call.op.name in vector_math64.FLOAT64:
            return vector_math64.FLOAT64[call.op.name](bb, call)
        if dtype != "float32":
            return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        return float32(bb, call)

    return legalize


def _elementwise(fn, name: str):
    def float32(bb, call):
        from tvm import te

        return bb.call_te(
            lambda t: te.compute(t.shape, lambda *i: fn(t(*i)), name=name),
            call.args[0],
            primfunc_name_hint=name,
        )

    legalize = by_dtype(float32)
    legalize.__doc__ = (
        f"``{name}`` through ``vector_math.{fn.__name__}`` (float32; float64 through "
        "``vector_math64``, TVM's otherwise)."
    )
    return legalize


legalize_exp = _elementwise(exp, "exp")
legalize_tanh = _elementwise(tanh, "tanh")
legalize_sigmoid = _elementwise(sigmoid, "sigmoid")


def gelu_tanh(x):
    """GELU's tanh form (``torch.nn.functional.gelu(approximate="tanh")``)."""
    c = _f32(0.7978845608028654)  # sqrt(2 / pi)
    return _f32(0.5) * x * (_f32(1.0) + tanh(c * (x + _f32(0.044715) * x * x * x)))


legalize_gelu_tanh = _elementwise(gelu_tanh, "gelu_tanh")


def legalize_softmax(bb, call):
    """``nn.softmax`` (float32) in TOPI's three passes (max, sum of exp, exp / sum), with
    ``vector_math.exp``: the schedule rules see the same reductions."""
    from tvm import ir, te

    x = call.args[0]
    if str(x.ty.dtype) != "float32":
        return ir.Op.get("relax.nn.softmax").get_attr("FLegalize")(bb, call)

    def softmax(t):
        ndim = len(t.shape)
        axis = int(call.attrs.axis) % ndim

        def reduced(idx, k):
            return (*idx[:axis], k, *idx[axis + 1 :])

        kmax = te.reduce_axis((0, t.shape[axis]), name="k")
        maxelem = te.compute(
            [d for i, d in enumerate(t.shape) if i != axis],
            lambda *idx: te.max(t(*reduced(idx, kmax)), axis=kmax),
            name="T_softmax_maxelem",
        )
        ksum = te.reduce_axis((0, t.shape[axis]), name="k")
        expsum = te.compute(
            [d for i, d in enumerate(t.shape) if i != axis],
            lambda *idx: te.sum(exp(t(*reduced(idx, ksum)) - maxelem(*idx)), axis=ksum),
            name="T_softmax_expsum",
        )

        def norm(*idx):
            rest = (*idx[:axis], *idx[axis + 1 :])
            return exp(t(*idx) - maxelem(*rest)) / expsum(*rest)

        return te.compute(t.shape, norm, name="T_softmax_norm")

    return bb.call_te(softmax, x, primfunc_name_hint="softmax")


LEGALIZATIONS = {
    "relax.exp": legalize_exp,
    "relax.tanh": legalize_tanh,
    "relax.sigmoid": legalize_sigmoid,
    "relax.nn.softmax": legalize_softmax,
    "relax.nn.gelu_tanh": legalize_gelu_tanh,
}
