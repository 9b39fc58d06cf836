"""``sin``, ``cos``, ``exp``, ``tanh`` and ``atan2`` in float64 from vectorizable arithmetic.

The decoder's harmonic source and its STFT run in float64 (``model/components.SOURCE_DTYPE``):
the sines of the nine harmonics' phases, ``tanh`` of their mix, ``atan2`` of the STFT bins, and
the inverse STFT's ``cos``/``sin`` of the generator's phases. TVM 0.27 lowers each float64
``tir.sin``/``cos``/``exp``/``atan2`` to one libm call per lane (``tanh`` goes through ``exp``):
the kernels that hold them ran scalar, a visible share of the decoder at every length
(docs/measurements.md, "Float64 transcendentals"). ``compile.vector_math`` and
``legalizations.sin`` do the same for float32; this module is their float64 counterpart, with
series long enough for float64.

Every function is plain multiplies, adds, compares, selects and bit operations on float64 and
64-bit integers, which LLVM vectorizes at every target's width. Accuracy, against numpy's libm
in float64 (``tests/test_vector_math64.py``, with and without FMA): ``sin``/``cos`` within
``6e-16`` absolute for ``|x| < 2^26 pi`` (the source's phases reach ~1e6 rad), ``exp`` within
``4e-16`` and ``tanh`` within ``1e-15`` relative, ``atan2`` within ``6e-16`` absolute, with
IEEE's signs at zeros (``atan2(+0, -0) = pi``, ``atan2(-0, x<0) = -pi``). Absolute error is
what the source needs: its values are mixed, transformed and rounded to float32 after, so an
error of one float64 ulp of 1 is far below what reaches the generator. Not handled: infinities
(none reach these ops) and ``|x| >= 2^26 pi`` for ``sin``/``cos`` (the reduction's products
stop being exact; the error grows with ``|x|``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

#: float64 1.5 * 2^52: ``y + MAGIC`` leaves round(y) in the low mantissa bits for |y| < 2^51
_MAGIC = 1.5 * 2.0**52
_MAGIC_BITS = 0x4338000000000000
_SIGN = 0x8000000000000000


def _split(value: Fraction, parts: int, bits: int) -> tuple[float, ...]:
    """``value`` as ``parts`` floats: each but the last rounded to ``bits`` significant bits (so
    that an integer of up to ``53 - bits`` bits times it is exact), the last the float64 nearest
    to what remains."""
    out = []
    rest = value
    for _ in range(parts - 1):
        exponent = math.floor(math.log2(abs(rest))) - bits + 1
        head = Fraction(round(rest / Fraction(2) ** exponent)) * Fraction(2) ** exponent
        out.append(float(head))
        rest -= head
    out.append(float(rest))
    return tuple(out)


# pi and ln 2 to 60 digits (more than the splits below use)
_PI_EXACT = Fraction("3.14159265358979323846264338327950288419716939937510582097494")
_LN2_EXACT = Fraction("0.693147180559945309417232121458176568075500134360255254120680")
#: pi = sum(_PI), the first three of 27 significant bits: ``n * _PI[k]`` is exact for |n| < 2^26
_PI = _split(_PI_EXACT, 4, 27)
_INV_PI = float(1 / _PI_EXACT)
#: ln 2 = _LN2[0] + _LN2[1], the first of 40 bits: ``n * _LN2[0]`` is exact for |n| <= 1075
_LN2 = _split(_LN2_EXACT, 2, 40)
_LOG2E = float(1 / _LN2_EXACT)
#: exp's argument range: 2^n stays a normal float64 (n in [-1022, 1023])
EXP_LO, EXP_HI = -708.0, 709.0
#: below this |x|, tanh takes its odd series (1 - 2 / (e^2x + 1) cancels near 0)
TANH_SMALL = 0.25
#: above this t = min / max, atan2 reduces t by atan t = pi/4 + atan((t - 1) / (t + 1))
_TAN_PI_8 = math.sqrt(2.0) - 1.0


def _taylor(terms: int, first: int, step: int, alternating: bool) -> tuple[float, ...]:
    """Coefficients ``1 / k!`` for k = first, first + step, ... (``terms`` of them); with
    ``alternating``, negative from the first on (sin's and cos's series after their first term)."""
    return tuple(
        (-1.0 if alternating and i % 2 == 0 else 1.0) / math.factorial(first + step * i)
        for i in range(terms)
    )


def _tanh_series(terms: int) -> tuple[float, ...]:
    """Coefficients of x^1, x^3, ... of tanh: 2^2k (2^2k - 1) B_2k / (2k)!, k = 1 .. terms."""
    bern = [Fraction(1)]  # B_0 .. B_2terms, B_1 = -1/2 convention
    for m in range(1, 2 * terms + 1):
        bern.append(-sum(math.comb(m + 1, k) * bern[k] for k in range(m)) / (m + 1))
    return tuple(
        float(Fraction(4**k * (4**k - 1)) * bern[2 * k] / math.factorial(2 * k))
        for k in range(1, terms + 1)
    )


# sin r on |r| <= pi/2: r^3 .. r^21 (first term left out r^23/23! <= 1.3e-18)
_SIN_COEFS = _taylor(10, 3, 2, alternating=True)
# cos r on |r| <= pi/2: r^2 .. r^22 (left out r^24/24! <= 8e-20)
_COS_COEFS = _taylor(11, 2, 2, alternating=True)
# e^r on |r| <= ln2/2: r^0 .. r^13 (left out r^14/14! <= 4e-18)
_EXP_COEFS = _taylor(14, 0, 1, alternating=False)
# tanh x on |x| <= 0.25: x^1 .. x^23 (successive terms shrink by ~(2x/pi)^2 <= 0.026)
_TANH_COEFS = _tanh_series(12)
# atan u on |u| <= tan(pi/8): (-1)^k u^(2k+1) / (2k+1), k = 1 .. 20 (left out u^43/43 < 1e-18)
_ATAN_COEFS = tuple((-1.0) ** k / (2 * k + 1) for k in range(1, 21))


def _f64(c: float):
    from tvm import tirx

    return tirx.const(c, "float64")


def _u64(c: int):
    from tvm import tirx

    return tirx.const(c, "uint64")


def _dtype(x) -> str:
    # TVM 0.27: a PrimExpr's type is ``.ty``; loads and TE tensor slices have ``.dtype``
    return str(x.dtype if hasattr(x, "dtype") else x.ty)


def _check(*xs) -> None:
    for x in xs:
        if _dtype(x) != "float64":
            raise TypeError(f"vector_math64: float64 only, got {_dtype(x)}")


def _let(value, body: Callable):
    """``body(v)`` with ``v`` bound to ``value`` once. A value used several times is otherwise
    copied into the expression tree at each use, and the copies multiply through the series'
    Horner steps and the selects: the decoder's build took minutes in TVM's simplifier."""
    from tvm import tirx

    var = tirx.Var("v", _dtype(value))
    return tirx.Let(var, value, body(var))


def _horner(coefs: tuple[float, ...], z):
    out = _f64(coefs[-1])
    for c in reversed(coefs[:-1]):
        out = out * z + _f64(c)
    return out


def _magic(y):
    """The bits of ``y + MAGIC``, round(y) in their low bits for |y| < 2^51 (its parity is bit
    0). No ``round`` call: LLVM turns that into scalar ``nearbyint`` calls on SSE2-only targets,
    and ``(y + MAGIC) - MAGIC`` would be folded back to ``y`` by TVM's simplifier."""
    from tvm import tirx

    return tirx.reinterpret("uint64", y + _f64(_MAGIC))


def _integer(bits):
    """round(y) as int64, from ``_magic(y)``."""
    from tvm import tirx

    return tirx.reinterpret("int64", bits - _u64(_MAGIC_BITS))


def _flip(value, bits):
    """``value`` with its sign flipped where bit 0 of ``bits`` is set: ``(-1)^n value``."""
    from tvm import tirx

    return tirx.reinterpret("float64", tirx.reinterpret("uint64", value) ^ (bits << _u64(63)))


def _reduced(x, series: Callable):
    """``(-1)^n series(r, r^2)`` with ``r = x - n pi``, ``n = round(x / pi)``, |r| <= pi/2 +
    tiny, by Cody-Waite: each ``n * _PI[k]`` is exact for |n| < 2^26, so only the subtractions
    round (by about ulp(r))."""

    def at(x):
        def with_bits(bits):
            def with_n(n):
                r = x
                for part in _PI:
                    r = r - n * _f64(part)
                return _let(r, lambda r: _let(r * r, lambda r2: _flip(series(r, r2), bits)))

            return _let(_integer(bits).astype("float64"), with_n)

        return _let(_magic(x * _f64(_INV_PI)), with_bits)

    return _let(x, at)


def sin(x):
    """sin x = (-1)^n sin r, r = x - n pi, sin r by its Taylor series."""
    _check(x)
    return _reduced(x, lambda r, r2: r + r * r2 * _horner(_SIN_COEFS, r2))


def cos(x):
    """cos x = (-1)^n cos r, r = x - n pi, cos r by its Taylor series."""
    _check(x)
    return _reduced(x, lambda r, r2: _f64(1.0) + r2 * _horner(_COS_COEFS, r2))


def exp(x):
    """e^x = 2^n e^r, n = round(x / ln2), r = x - n ln2 (two-part ln2), e^r by Taylor, 2^n built
    in the exponent bits; x clamped to [EXP_LO, EXP_HI] (no 0, no inf)."""
    from tvm import tirx

    _check(x)
    bias, shift = tirx.const(1023, "int64"), tirx.const(52, "int64")

    def at(v):
        def with_k(k):
            def with_n(n):
                r = v - n * _f64(_LN2[0]) - n * _f64(_LN2[1])
                scale = tirx.reinterpret("float64", (k + bias) << shift)
                return _let(r, lambda r: _horner(_EXP_COEFS, r) * scale)

            return _let(k.astype("float64"), with_n)

        return _let(_integer(_magic(v * _f64(_LOG2E))), with_k)

    return _let(tirx.max(tirx.min(x, _f64(EXP_HI)), _f64(EXP_LO)), at)


def tanh(x):
    """tanh x: its odd series below ``TANH_SMALL``, else ``sign(x) (1 - 2 / (e^2|x| + 1))``."""
    from tvm import tirx

    _check(x)

    def at(x):
        a = tirx.abs(x)
        small = _let(x * x, lambda x2: x * _horner(_TANH_COEFS, x2))
        large = _f64(1.0) - _f64(2.0) / (exp(a * _f64(2.0)) + _f64(1.0))
        sign = tirx.reinterpret("uint64", x) & _u64(_SIGN)
        large = tirx.reinterpret("float64", tirx.reinterpret("uint64", large) | sign)
        return tirx.Select(a < _f64(TANH_SMALL), small, large)

    return _let(x, at)


def atan2(y, x):
    """atan2(y, x): atan of ``t = min(|x|, |y|) / max(|x|, |y|)`` (reduced past tan(pi/8)),
    mirrored into the octant and quadrant of (x, y); the sign is y's, the half plane x's sign
    bit, so that signed zeros give IEEE's results (atan2(+-0, -0) = +-pi)."""
    from tvm import tirx

    _check(y, x)

    def at(y, x):
        ax, ay = tirx.abs(x), tirx.abs(y)
        hi, lo = tirx.max(ax, ay), tirx.min(ax, ay)
        negative_x = (tirx.reinterpret("uint64", x) & _u64(_SIGN)) != _u64(0)
        sign = tirx.reinterpret("uint64", y) & _u64(_SIGN)

        def with_t(t):  # 0 / 0 only in the lane not taken
            big = t > _f64(_TAN_PI_8)

            def with_atan(a):  # atan t, then its octant, then its half plane, then y's sign
                def signed(a):
                    return tirx.reinterpret("float64", tirx.reinterpret("uint64", a) | sign)

                def half(a):
                    return _let(tirx.Select(negative_x, _f64(math.pi) - a, a), signed)

                def octant(a):
                    return _let(tirx.Select(ay > ax, _f64(math.pi / 2) - a, a), half)

                return _let(tirx.Select(big, _f64(math.pi / 4) + a, a), octant)

            u = tirx.Select(big, (t - _f64(1.0)) / (t + _f64(1.0)), t)
            return _let(
                u,
                lambda u: _let(
                    u * u, lambda u2: _let(u + u * u2 * _horner(_ATAN_COEFS, u2), with_atan)
                ),
            )

        return _let(tirx.Select(hi > _f64(0.0), lo / hi, _f64(0.0)), with_t)

    return _let(y, lambda y: _let(x, lambda x: at(y, x)))


# -- Relax legalizations (``legalizations.LEGALIZE_MAP``) ------------------------------------------


def _legalize(fn, name: str, arity: int):
    """A legalization of a float64 op of ``arity`` same-shape operands through ``fn``; TVM's
    own for any other dtype or shape."""

    def legalize(bb, call):
        from tvm import ir, te

        args = call.args[:arity]
        same = len({str(a.ty.shape) for a in args}) == 1
        if not same or any(str(a.ty.dtype) != "float64" for a in args):
            return ir.Op.get(call.op.name).get_attr("FLegalize")(bb, call)
        return bb.call_te(
            lambda *ts: te.compute(ts[0].shape, lambda *i: fn(*(t(*i) for t in ts)), name=name),
            *args,
            primfunc_name_hint=name,
        )

    legalize.__doc__ = f"``{name}`` through ``vector_math64.{fn.__name__}`` (float64)."
    return legalize


#: float64 legalizations by op. ``relax.sin``, ``exp`` and ``tanh`` have float32 ones too, which
#: hand their float64 calls here (``legalizations.sin``, ``vector_math``); the others are
#: ``LEGALIZATIONS``.
FLOAT64 = {
    "relax.sin": _legalize(sin, "sin64", 1),
    "relax.cos": _legalize(cos, "cos64", 1),
    "relax.exp": _legalize(exp, "exp64", 1),
    "relax.tanh": _legalize(tanh, "tanh64", 1),
    "relax.atan2": _legalize(atan2, "atan2_64", 2),
}
LEGALIZATIONS = {op: FLOAT64[op] for op in ("relax.cos", "relax.atan2")}
