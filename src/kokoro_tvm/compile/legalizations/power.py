"""``relax.power`` by a small constant integer as multiplies."""

from __future__ import annotations


def power_by_multiplies(bb, call):
    """``x ** n`` for a constant small integer ``n`` as ``n - 1`` multiplies. TOPI calls libm
    ``powf`` once per lane, and ALBERT's tanh GELU (``x + 0.044715 * x**3``, 12 times per call)
    spent a visible share of the duration predictor there."""
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


LEGALIZATIONS = {"relax.power": power_by_multiplies}
