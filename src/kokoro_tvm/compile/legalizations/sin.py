"""``relax.sin`` as vectorizable arithmetic: ``sin_poly`` in float32, ``vector_math64.sin`` in
float64."""

from __future__ import annotations

from .. import vector_math

# pi = _PI[0] + _PI[1] + _PI[2] + _PI[3] + O(3.5e-15). The first three have 5 significant bits
# (3.125 = 11.001b, 0.0166015625 = 17 * 2^-10, -9.059906005859375e-06 = -19 * 2^-21), so n * _PI[k]
# is exact in float32 for every integer |n| < 2^19. _PI[3] is the float32 nearest to the rest.
_PI = (3.125, 0.0166015625, -9.059906005859375e-06, 1.5099580252808664e-07)
_INV_PI = 0.3183098861837907  # rounded to float32 by tirx.const
_ROUND_MAGIC_BITS = 0x4B400000  # float32 1.5 * 2^23: t = y + 1.5*2^23 rounds y to an integer
# sin(r) ~ r + r^3 * P(r^2) on |r| <= 1.77: odd, degree 11, float32 coefficients fitted for
# absolute error (Lawson-weighted least squares on Chebyshev nodes, each coefficient rounded to
# float32 before the later ones are refitted). Max |poly - sin| = 4.7e-10 in exact arithmetic.
_SIN_COEFS = (
    -0.1666666716337204,
    0.008333343081176281,
    -0.0001984172995435074,
    2.7549358492251486e-06,
    -2.409929322766402e-08,
)  # r^3, r^5, r^7, r^9, r^11


def sin_poly(x):
    """TE ``sin`` (float32) built from vectorizable arithmetic only. ``T.sin`` lowers to one libm
    ``sinf`` call per lane (no vector sin in LLVM's default lowering): the generator's Snake
    activations (``x + sin(a*x)^2 / a`` over 128 x 120m samples, 24 times) spent a visible share
    of the decoder there. No ``round`` either (LLVM turns it into scalar ``nearbyintf`` calls on
    SSE2-only targets). The sine source takes sin of phases up to ~1e6 rad (the 9th harmonic within
    a minute of audio), hence the accurate reduction below.

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
    |x| <= 1.647e6 (benchmarks/sin_accuracy.py --exhaustive): max 1.25e-7 on x86-64-v3 (FMA
    contracted), 1.20e-7 on x86-64 and on the SSE2 baseline; the exactness of the products and of
    the first three subtractions was checked for every such float32 with n from both the fused and
    the unfused rounding step. libm sinf on the same inputs: 3.3e-8.

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

    f32 = lambda c: tirx.const(c, "float32")
    u32 = lambda c: tirx.const(c, "uint32")

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


legalize_sin = vector_math.by_dtype(
    lambda bb, call: bb.call_te(sin_poly, call.args[0], primfunc_name_hint="sin")
)


LEGALIZATIONS = {"relax.sin": legalize_sin}
